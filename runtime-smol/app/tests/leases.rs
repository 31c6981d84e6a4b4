//! The lease registry of docs/http-api.md#leases: acquire, release, list, pruning of dead owners,
//! refusals, atomic writes, and exactly one winner among concurrent acquirers (threads and
//! processes).
//!
//! Cross-process cases re-run this test binary as a child (`CONNOP_LEASE_CHILD` set, filtered to
//! `lease_child`), or write registry entries for `sleep` children directly.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

use connop_app::cli::lease;
use connop_app::lease::{
    LeaseEntry, Refusal, list, process_start_time, registry_path, try_acquire,
};
use serde_json::{Value, json};

const CHILD_ENV: &str = "CONNOP_LEASE_CHILD";
const HOME_ENV: &str = "CONNOP_LEASE_HOME";
const SESSION_ENV: &str = "CONNOP_LEASE_SESSION";

/// A fresh home directory, removed on drop.
struct Home(PathBuf);

impl Home {
    fn new(name: &str) -> Home {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "connop-leases-{}-{}-{name}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Home(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write_registry(&self, text: &str) {
        let path = registry_path(&self.0);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn write_entries(&self, entries: &[LeaseEntry]) {
        let doc = json!({"entries": entries.iter().map(LeaseEntry::to_json).collect::<Vec<_>>()});
        self.write_registry(&doc.to_string());
    }

    fn raw(&self) -> Value {
        serde_json::from_slice(&std::fs::read(registry_path(&self.0)).unwrap()).unwrap()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn entry(session_id: &str, pid: u32, process_start_time: u64) -> LeaseEntry {
    LeaseEntry {
        lease_id: format!("lease-{session_id}"),
        session_id: session_id.to_owned(),
        surface: "desktop".to_owned(),
        pid,
        process_start_time,
        started_at: 1.0,
        updated_at: 1.0,
        metadata: json!({}),
    }
}

fn sessions(home: &Path) -> Vec<String> {
    let mut ids: Vec<String> = list(home)
        .unwrap()
        .into_iter()
        .map(|e| e.session_id)
        .collect();
    ids.sort();
    ids
}

fn viewer_metadata() -> Value {
    json!({"live_session_id": "live-1", "bot_live_delivery_consumer": true})
}

/// The helper process: does nothing unless this binary was started as a child by a test below.
#[test]
fn lease_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let home = PathBuf::from(std::env::var(HOME_ENV).unwrap());
    let session = std::env::var(SESSION_ENV).unwrap();
    let stdin = std::io::stdin();
    match mode.as_str() {
        "acquire" => {
            let mut line = String::new();
            stdin.lock().read_line(&mut line).unwrap(); // "go"
            let outcome = try_acquire(&home, &session, "desktop", json!({}), 0);
            match &outcome {
                Ok(_) => println!("CHILD:won"),
                Err(refusal) => println!("CHILD:refused:{}", refusal.reason()),
            }
            std::io::stdout().flush().unwrap();
            // Hold until the parent closes stdin; the lease is released on drop.
            std::io::copy(&mut stdin.lock(), &mut std::io::sink()).unwrap();
            drop(outcome);
        }
        "hold" => {
            lease::hold(&home, &session, "desktop", viewer_metadata()).unwrap();
            println!("CHILD:released");
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn_child(mode: &str, home: &Path, session: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["lease_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .env(HOME_ENV, home)
        .env(SESSION_ENV, session)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Forwards the child's stdout lines to a channel, so the test can wait with a timeout.
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The rest of the child's next line from `marker` on (libtest may print `test … ` before it).
fn next_line_from(rx: &mpsc::Receiver<String>, marker: &str) -> String {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the child answered in time");
        if let Some(at) = line.find(marker) {
            return line[at..].to_owned();
        }
    }
}

fn sleeper() -> Child {
    Command::new("sh")
        .args(["-c", "exec sleep 30"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn kill_and_reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn acquire_list_release_round_trip() {
    let home = Home::new("round-trip");
    assert!(list(home.path()).unwrap().is_empty());
    let lease = try_acquire(home.path(), "bot-chat", "desktop", json!({}), 0).unwrap();
    assert_eq!(lease.session_id(), "bot-chat");
    assert_eq!(lease.lease_id().len(), 32);
    assert!(lease.lease_id().chars().all(|c| c.is_ascii_hexdigit()));

    let entries = list(home.path()).unwrap();
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry, lease.entry());
    assert_eq!(entry.surface, "desktop");
    assert_eq!(entry.pid, std::process::id());
    assert_eq!(
        Some(entry.process_start_time),
        process_start_time(std::process::id())
    );
    assert!(entry.started_at > 1.6e9 && entry.started_at == entry.updated_at);

    lease.release().unwrap();
    assert!(list(home.path()).unwrap().is_empty());
    assert_eq!(home.raw(), json!({"entries": []}));
    // Released: the session can be taken again.
    try_acquire(home.path(), "bot-chat", "desktop", json!({}), 0)
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn dropping_a_lease_releases_it() {
    let home = Home::new("drop");
    {
        let _lease = try_acquire(home.path(), "s", "cli", json!({}), 0).unwrap();
        assert_eq!(sessions(home.path()), ["s"]);
    }
    assert!(list(home.path()).unwrap().is_empty());
}

#[test]
fn a_second_live_owner_is_refused_even_in_the_same_process() {
    let home = Home::new("second-owner");
    let first = try_acquire(home.path(), "bot-chat", "desktop", json!({}), 0).unwrap();
    let refusal = try_acquire(home.path(), "bot-chat", "cli", json!({}), 0).unwrap_err();
    assert_eq!(refusal.reason(), "SESSION_NOT_OWNED");
    let message = refusal.to_string();
    assert!(message.contains("bot-chat"), "{message}");
    assert!(
        message.contains(&std::process::id().to_string()),
        "{message}"
    );
    assert!(message.contains(first.lease_id()), "{message}");
    // Another session is not affected.
    let other = try_acquire(home.path(), "scratch", "desktop", json!({}), 0).unwrap();
    assert_eq!(sessions(home.path()), ["bot-chat", "scratch"]);
    // The refused attempt changed nothing.
    assert_eq!(list(home.path()).unwrap()[0], *first.entry());
    first.release().unwrap();
    other.release().unwrap();
}

#[test]
fn another_live_process_owns_and_dead_owners_are_pruned() {
    let home = Home::new("other-process");
    let sleeper = sleeper();
    let live_pid = sleeper.id();
    let start = process_start_time(live_pid).expect("the sleeper runs");
    let mut exited = Command::new("sh").args(["-c", "exit 0"]).spawn().unwrap();
    let exited_pid = exited.id();
    exited.wait().unwrap();
    assert_eq!(process_start_time(exited_pid), None);
    home.write_entries(&[
        entry("live", live_pid, start),
        entry("reused-pid", live_pid, start + 1),
        entry("exited", exited_pid, start),
    ]);

    // Listing prunes the two dead ones and rewrites the registry without them.
    assert_eq!(sessions(home.path()), ["live"]);
    assert_eq!(home.raw()["entries"].as_array().unwrap().len(), 1);

    let refusal = try_acquire(home.path(), "live", "desktop", json!({}), 0).unwrap_err();
    assert_eq!(refusal.reason(), "SESSION_NOT_OWNED");
    assert!(
        matches!(&refusal, Refusal::SessionNotOwned { pid, .. } if *pid == live_pid),
        "{refusal:?}"
    );
    let reused = try_acquire(home.path(), "reused-pid", "desktop", json!({}), 0).unwrap();
    let gone = try_acquire(home.path(), "exited", "desktop", json!({}), 0).unwrap();

    // Once the owner dies, its session is free.
    kill_and_reap(sleeper);
    let taken = try_acquire(home.path(), "live", "desktop", json!({}), 0).unwrap();
    assert_eq!(sessions(home.path()), ["exited", "live", "reused-pid"]);
    for lease in [reused, gone, taken] {
        lease.release().unwrap();
    }
    assert!(list(home.path()).unwrap().is_empty());
}

#[test]
fn a_zombie_owner_is_dead() {
    let home = Home::new("zombie");
    let mut child = Command::new("sh").args(["-c", "exit 0"]).spawn().unwrap();
    let pid = child.id();
    // Not reaped yet: /proc still lists it, as a zombie.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while process_start_time(pid).is_some() {
        assert!(std::time::Instant::now() < deadline, "the child exits");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    home.write_entries(&[entry("s", pid, 1)]);
    let lease = try_acquire(home.path(), "s", "desktop", json!({}), 0).unwrap();
    lease.release().unwrap();
    child.wait().unwrap();
}

#[test]
fn an_unreadable_registry_refuses_and_is_left_as_it_is() {
    let home = Home::new("corrupt");
    for text in [
        "{not json",
        "",
        "[]",
        r#"{"entries": 3}"#,
        r#"{"entries": [{"lease_id": "x"}]}"#,
        r#"{"entries": [{"lease_id": "x", "session_id": "s", "surface": "d", "pid": -1, "process_start_time": 1, "started_at": 1, "updated_at": 1, "metadata": {}}]}"#,
    ] {
        home.write_registry(text);
        let refusal = try_acquire(home.path(), "s", "desktop", json!({}), 0).unwrap_err();
        assert_eq!(
            refusal.reason(),
            "SESSION_COORDINATION_UNAVAILABLE",
            "{text}"
        );
        assert!(matches!(refusal, Refusal::CoordinationUnavailable { .. }));
        assert!(
            refusal.to_string().contains("active_sessions.json"),
            "{refusal}"
        );
        let listed = list(home.path()).unwrap_err();
        assert_eq!(listed.reason(), "SESSION_COORDINATION_UNAVAILABLE");
        assert_eq!(
            std::fs::read_to_string(registry_path(home.path())).unwrap(),
            text
        );
    }
}

#[test]
fn a_lease_released_into_a_corrupt_registry_does_not_overwrite_it() {
    let home = Home::new("release-corrupt");
    let lease = try_acquire(home.path(), "s", "desktop", json!({}), 0).unwrap();
    home.write_registry("garbage");
    let refusal = lease.release().unwrap_err();
    assert_eq!(refusal.reason(), "SESSION_COORDINATION_UNAVAILABLE");
    assert_eq!(
        std::fs::read_to_string(registry_path(home.path())).unwrap(),
        "garbage"
    );
}

#[test]
fn a_positive_cap_refuses_past_the_live_leases() {
    let home = Home::new("cap");
    let mut exited = Command::new("sh").args(["-c", "exit 0"]).spawn().unwrap();
    let dead_pid = exited.id();
    exited.wait().unwrap();
    // A dead lease does not count toward the cap.
    home.write_entries(&[entry("dead", dead_pid, 1)]);
    let a = try_acquire(home.path(), "a", "desktop", json!({}), 2).unwrap();
    let b = try_acquire(home.path(), "b", "desktop", json!({}), 2).unwrap();
    let refusal = try_acquire(home.path(), "c", "desktop", json!({}), 2).unwrap_err();
    assert_eq!(refusal.reason(), "MAX_CONCURRENT_SESSIONS");
    assert_eq!(refusal, Refusal::MaxConcurrentSessions { max: 2, live: 2 });
    assert!(refusal.to_string().contains('2'));
    // Session ownership is checked first; 0 means unlimited.
    assert_eq!(
        try_acquire(home.path(), "a", "desktop", json!({}), 2)
            .unwrap_err()
            .reason(),
        "SESSION_NOT_OWNED"
    );
    let c = try_acquire(home.path(), "c", "desktop", json!({}), 0).unwrap();
    a.release().unwrap();
    let d = try_acquire(home.path(), "d", "desktop", json!({}), 3).unwrap();
    assert_eq!(sessions(home.path()), ["b", "c", "d"]);
    for lease in [b, c, d] {
        lease.release().unwrap();
    }
}

#[test]
fn writes_are_atomic_and_no_update_is_lost_across_threads() {
    let home = Home::new("atomic");
    let threads = 12;
    let barrier = Arc::new(Barrier::new(threads));
    let leases: Vec<_> = (0..threads)
        .map(|i| {
            let (home, barrier) = (home.path().to_path_buf(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                try_acquire(&home, &format!("s{i:02}"), "desktop", json!({"i": i}), 0).unwrap()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    // Every update is there, and the file on disk is valid JSON of the documented shape.
    let raw = home.raw();
    let entries = raw["entries"].as_array().unwrap();
    assert_eq!(entries.len(), threads);
    for entry in entries {
        let parsed = LeaseEntry::from_json(entry).unwrap();
        assert_eq!(parsed.to_json(), *entry);
    }
    // Nothing but the registry and its lock is left in runtime/.
    let names: HashSet<String> = std::fs::read_dir(home.path().join("runtime"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        HashSet::from([
            "active_sessions.json".to_owned(),
            "active_sessions.lock".to_owned()
        ])
    );
    std::thread::scope(|scope| {
        for lease in leases {
            scope.spawn(move || lease.release().unwrap());
        }
    });
    assert_eq!(home.raw(), json!({"entries": []}));
}

#[test]
fn concurrent_threads_on_one_session_have_exactly_one_winner() {
    let home = Home::new("threads-one-session");
    let threads = 12;
    let barrier = Arc::new(Barrier::new(threads));
    let outcomes: Vec<_> = (0..threads)
        .map(|_| {
            let (home, barrier) = (home.path().to_path_buf(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                try_acquire(&home, "bot-chat", "desktop", json!({}), 0)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let winners = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(winners, 1);
    for outcome in &outcomes {
        if let Err(refusal) = outcome {
            assert_eq!(refusal.reason(), "SESSION_NOT_OWNED");
        }
    }
    assert_eq!(sessions(home.path()), ["bot-chat"]);
}

#[test]
fn concurrent_processes_on_one_session_have_exactly_one_winner() {
    let home = Home::new("processes-one-session");
    let mut children: Vec<Child> = (0..6)
        .map(|_| spawn_child("acquire", home.path(), "bot-chat"))
        .collect();
    let lines: Vec<_> = children.iter_mut().map(stdout_lines).collect();
    let mut stdins: Vec<ChildStdin> = children
        .iter_mut()
        .map(|c| c.stdin.take().unwrap())
        .collect();
    for stdin in &mut stdins {
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
    let outcomes: Vec<String> = lines
        .iter()
        .map(|rx| next_line_from(rx, "CHILD:"))
        .collect();
    let winners = outcomes.iter().filter(|o| *o == "CHILD:won").count();
    assert_eq!(winners, 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| o == "CHILD:won" || o == "CHILD:refused:SESSION_NOT_OWNED"),
        "{outcomes:?}"
    );
    let owner = list(home.path()).unwrap();
    assert_eq!(owner.len(), 1);
    assert!(children.iter().any(|c| c.id() == owner[0].pid));
    // This process is one more acquirer, and is refused too.
    assert_eq!(
        try_acquire(home.path(), "bot-chat", "cli", json!({}), 0)
            .unwrap_err()
            .reason(),
        "SESSION_NOT_OWNED"
    );
    drop(stdins);
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    assert!(list(home.path()).unwrap().is_empty());
}

#[test]
fn metadata_round_trips() {
    let home = Home::new("metadata");
    let metadata = viewer_metadata();
    let lease = try_acquire(home.path(), "bot-chat", "desktop", metadata.clone(), 0).unwrap();
    assert_eq!(lease.entry().metadata, metadata);
    assert_eq!(list(home.path()).unwrap()[0].metadata, metadata);
    let raw = home.raw();
    let stored = &raw["entries"][0];
    assert_eq!(stored["metadata"], metadata);
    let keys: Vec<&str> = stored
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "lease_id",
            "session_id",
            "surface",
            "pid",
            "process_start_time",
            "started_at",
            "updated_at",
            "metadata"
        ]
    );
    assert_eq!(LeaseEntry::from_json(stored).unwrap(), *lease.entry());
    lease.release().unwrap();
}

#[test]
fn process_start_time_identifies_running_processes_only() {
    let me = process_start_time(std::process::id()).unwrap();
    assert_eq!(process_start_time(std::process::id()), Some(me));
    assert_eq!(process_start_time(0), None);
    assert_eq!(process_start_time(u32::MAX), None);
}

fn hold_child(home: &Home) -> (Child, mpsc::Receiver<String>, LeaseEntry) {
    let mut child = spawn_child("hold", home.path(), "bot-chat");
    let rx = stdout_lines(&mut child);
    let line = next_line_from(&rx, "{");
    let printed = LeaseEntry::from_json(&serde_json::from_str(&line).unwrap()).unwrap();
    assert_eq!(printed.pid, child.id());
    assert_eq!(printed.metadata, viewer_metadata());
    assert_eq!(list(home.path()).unwrap(), std::slice::from_ref(&printed));
    assert_eq!(
        try_acquire(home.path(), "bot-chat", "desktop", json!({}), 0)
            .unwrap_err()
            .reason(),
        "SESSION_NOT_OWNED"
    );
    (child, rx, printed)
}

#[test]
fn hold_releases_when_stdin_closes() {
    let home = Home::new("hold-eof");
    let (mut child, rx, _) = hold_child(&home);
    drop(child.stdin.take());
    assert_eq!(next_line_from(&rx, "CHILD:"), "CHILD:released");
    assert!(child.wait().unwrap().success());
    assert!(list(home.path()).unwrap().is_empty());
}

#[test]
fn hold_releases_on_sigterm() {
    let home = Home::new("hold-term");
    let (mut child, rx, _) = hold_child(&home);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert_eq!(next_line_from(&rx, "CHILD:"), "CHILD:released");
    assert!(child.wait().unwrap().success());
    assert!(list(home.path()).unwrap().is_empty());
}

#[test]
fn hold_of_an_owned_session_fails_with_the_reason() {
    let home = Home::new("hold-refused");
    let lease = try_acquire(home.path(), "bot-chat", "desktop", json!({}), 0).unwrap();
    let error = lease::hold(home.path(), "bot-chat", "cli", json!({})).unwrap_err();
    assert_eq!(error.exit_code(), 1);
    let error = error.to_string();
    assert!(error.starts_with("SESSION_NOT_OWNED: "), "{error}");
    lease.release().unwrap();
}
