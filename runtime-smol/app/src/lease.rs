//! Leases: which live process holds a session (docs/http-api.md#leases).
//!
//! The registry is `CONNOP_HOME/runtime/active_sessions.json`, read and rewritten only while an
//! exclusive lock on `runtime/active_sessions.lock` is held, and replaced atomically (temp file
//! in the same directory, fsync, rename). A lease is live while a process with its pid exists
//! and started at the recorded time, so a reused pid does not keep a dead owner's lease; dead
//! leases are pruned on every acquire and list.
//!
//! A lease is a claim of presence, nothing more: the HTTP API never acquires one and is never
//! refused by one, and a desktop lease — even one whose metadata advertises a delivery
//! consumer — is a viewer, not an executor. Nothing here routes turns anywhere.
//!
//! A second acquire of a session that already has a live lease is refused with
//! `SESSION_NOT_OWNED` even when the live lease belongs to the calling process: each acquire is
//! a separate owner, and the holder of the first [`Lease`] keeps it until it is released or
//! dropped.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::private_fs;

use serde_json::{Value, json};

/// The registry file's name inside `CONNOP_HOME/runtime`.
const REGISTRY_FILE: &str = "active_sessions.json";
/// The lock file's name inside `CONNOP_HOME/runtime`.
const LOCK_FILE: &str = "active_sessions.lock";

/// How long the registry's lock is waited for before the registry counts as unavailable
/// (`SESSION_COORDINATION_UNAVAILABLE`): anyone who can read the lock file can hold it.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Where the lease registry of `home` lives, so callers and tests can inspect it.
pub fn registry_path(home: &Path) -> PathBuf {
    home.join("runtime").join(REGISTRY_FILE)
}

/// Why a lease was not granted (or the registry could not be read); the CLI prints
/// [`Refusal::reason`] and the message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// Another live lease already holds the session.
    #[error(
        "session {session_id} is already held by live process {pid} (surface {surface}, lease \
         {lease_id}); release it there or wait for that process to exit"
    )]
    SessionNotOwned {
        /// The session asked for.
        session_id: String,
        /// The holder's process id.
        pid: u32,
        /// The holder's surface.
        surface: String,
        /// The holder's lease id.
        lease_id: String,
    },
    /// The registry (or its lock) could not be read or written; it is left as it is.
    #[error(
        "the session registry {} cannot be used: {detail}; it was left untouched — fix or \
         remove it by hand",
        path.display()
    )]
    CoordinationUnavailable {
        /// The file that failed.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// The positive cap on concurrent sessions is reached by live leases.
    #[error("{live} live sessions already reach the cap of {max}; release one first")]
    MaxConcurrentSessions {
        /// The cap.
        max: usize,
        /// The live leases counted.
        live: usize,
    },
}

impl Refusal {
    /// The machine-readable reason code of docs/http-api.md#leases.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::SessionNotOwned { .. } => "SESSION_NOT_OWNED",
            Refusal::CoordinationUnavailable { .. } => "SESSION_COORDINATION_UNAVAILABLE",
            Refusal::MaxConcurrentSessions { .. } => "MAX_CONCURRENT_SESSIONS",
        }
    }
}

/// Why a registry entry could not be read; the registry is then unusable (it is never
/// rewritten over an entry it cannot read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The entry is not a JSON object.
    #[error("an entry is not an object")]
    NotAnObject,
    /// A key is missing or holds the wrong kind of value.
    #[error("entry key {key:?} is missing or not {expected}")]
    BadKey {
        /// The key.
        key: &'static str,
        /// What it must hold.
        expected: &'static str,
    },
}

fn unavailable(path: &Path, detail: impl std::fmt::Display) -> Refusal {
    Refusal::CoordinationUnavailable {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    }
}

/// One registry entry, with the JSON keys of docs/http-api.md#leases. (The crate has no `serde`
/// dependency, so [`LeaseEntry::to_json`] and [`LeaseEntry::from_json`] do the conversion.)
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseEntry {
    /// Random hex id of this lease.
    pub lease_id: String,
    /// The session the lease holds.
    pub session_id: String,
    /// Who holds it (`desktop`, `cli`, …); informational.
    pub surface: String,
    /// The holder's process id.
    pub pid: u32,
    /// The holder's start time (clock ticks since boot, `/proc/<pid>/stat` field 22); with the
    /// pid it identifies the process incarnation.
    pub process_start_time: u64,
    /// When the lease was taken, seconds since the UNIX epoch.
    pub started_at: f64,
    /// When the entry was last written, seconds since the UNIX epoch.
    pub updated_at: f64,
    /// Free-form metadata given by the holder; never interpreted here.
    pub metadata: Value,
}

impl LeaseEntry {
    /// The entry as its registry JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "lease_id": self.lease_id,
            "session_id": self.session_id,
            "surface": self.surface,
            "pid": self.pid,
            "process_start_time": self.process_start_time,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "metadata": self.metadata,
        })
    }

    /// Reads an entry from its registry JSON object; the error names the bad key.
    pub fn from_json(value: &Value) -> Result<Self, EntryError> {
        let object = value.as_object().ok_or(EntryError::NotAnObject)?;
        let bad = |key, expected| EntryError::BadKey { key, expected };
        let text = |key| -> Result<String, EntryError> {
            object
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(bad(key, "a string"))
        };
        let float = |key| -> Result<f64, EntryError> {
            object
                .get(key)
                .and_then(Value::as_f64)
                .ok_or(bad(key, "a number"))
        };
        let pid = object
            .get("pid")
            .and_then(Value::as_u64)
            .and_then(|pid| u32::try_from(pid).ok())
            .ok_or(bad("pid", "a process id"))?;
        let process_start_time = object
            .get("process_start_time")
            .and_then(Value::as_u64)
            .ok_or(bad("process_start_time", "a non-negative integer"))?;
        Ok(LeaseEntry {
            lease_id: text("lease_id")?,
            session_id: text("session_id")?,
            surface: text("surface")?,
            pid,
            process_start_time,
            started_at: float("started_at")?,
            updated_at: float("updated_at")?,
            metadata: object.get("metadata").cloned().unwrap_or(Value::Null),
        })
    }

    /// Whether the holder still runs: its pid exists and started at the recorded time.
    pub fn is_live(&self) -> bool {
        process_start_time(self.pid) == Some(self.process_start_time)
    }
}

/// The start time of a running process, in clock ticks since boot (`/proc/<pid>/stat` field
/// 22); `None` when there is no such process or it has already exited (a zombie). Together with
/// the pid it identifies one process incarnation, which detects pid reuse.
pub fn process_start_time(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (comm) is parenthesised and may hold spaces or parentheses: the fields after it
    // start past the last ')'. There, field 3 (state) is index 0 and field 22 is index 19.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Now, in seconds since the UNIX epoch, rounded to the microsecond: such a value has at most
/// 16 significant digits, so it reads back from the JSON bit for bit.
fn now_secs() -> f64 {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    micros as f64 / 1e6
}

/// The registry, with its lock held until this is dropped.
struct Locked {
    _lock: File,
    dir: PathBuf,
    path: PathBuf,
}

impl Locked {
    fn open(home: &Path) -> Result<Self, Refusal> {
        private_fs::create_dir_all(home).map_err(|e| unavailable(home, e))?;
        let dir = home.join("runtime");
        private_fs::own_dir(&dir).map_err(|e| unavailable(&dir, e))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = private_fs::open_file(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &lock_path,
        )
        .map_err(|e| unavailable(&lock_path, e))?;
        lock_within(&lock, LOCK_WAIT).map_err(|e| unavailable(&lock_path, e))?;
        let path = dir.join(REGISTRY_FILE);
        Ok(Locked {
            _lock: lock,
            dir,
            path,
        })
    }

    /// The entries on disk; a missing file is an empty registry, anything unreadable refuses.
    fn read(&self) -> Result<Vec<LeaseEntry>, Refusal> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(unavailable(&self.path, e)),
        };
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| unavailable(&self.path, format!("not valid JSON ({e})")))?;
        let object = value
            .as_object()
            .ok_or_else(|| unavailable(&self.path, "not a JSON object"))?;
        match object.get("entries") {
            None => Ok(Vec::new()),
            Some(Value::Array(entries)) => entries
                .iter()
                .map(LeaseEntry::from_json)
                .collect::<Result<_, _>>()
                .map_err(|e| unavailable(&self.path, e)),
            Some(_) => Err(unavailable(&self.path, "\"entries\" is not an array")),
        }
    }

    /// Replaces the registry atomically: a temp file in the same directory, fsync, rename.
    fn write(&self, entries: &[LeaseEntry]) -> Result<(), Refusal> {
        let document =
            json!({ "entries": entries.iter().map(LeaseEntry::to_json).collect::<Vec<_>>() });
        let mut bytes = serde_json::to_vec_pretty(&document)
            .map_err(|e| unavailable(&self.path, format!("cannot encode ({e})")))?;
        bytes.push(b'\n');
        let temp = self.dir.join(format!(
            ".{REGISTRY_FILE}.{}.{}.tmp",
            std::process::id(),
            crate::sync::random_hex(8)
        ));
        let written = (|| -> std::io::Result<()> {
            let mut file =
                private_fs::open_file(OpenOptions::new().write(true).create_new(true), &temp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            fs::rename(&temp, &self.path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(unavailable(&self.path, e));
        }
        // Make the rename itself durable; a failure here leaves a correct file behind.
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

/// Why the registry's lock was not taken.
#[derive(Debug, thiserror::Error)]
enum LockError {
    /// Another process held it the whole time.
    #[error("its lock is held by another process and was not released within {} s", .0.as_secs())]
    Held(Duration),
    /// `flock` failed.
    #[error(transparent)]
    Flock(#[from] rustix::io::Errno),
}

/// Takes the exclusive `flock(2)` on `lock` (what `File::lock` does on Linux; std's is newer
/// than the workspace's MSRV), trying again with a growing pause for at most `within`. The
/// lock belongs to this open file, so threads of one process exclude each other too.
fn lock_within(lock: &File, within: Duration) -> Result<(), LockError> {
    use rustix::fs::FlockOperation::NonBlockingLockExclusive;
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(1);
    loop {
        match rustix::fs::flock(lock, NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(LockError::Held(within));
                }
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Drops dead entries; true when any was dropped.
fn prune(entries: &mut Vec<LeaseEntry>) -> bool {
    let before = entries.len();
    entries.retain(LeaseEntry::is_live);
    entries.len() != before
}

/// A held lease on a session; released by [`Lease::release`] or, best effort, on drop.
#[derive(Debug)]
pub struct Lease {
    home: PathBuf,
    entry: LeaseEntry,
    released: bool,
}

impl Lease {
    /// The random id of this lease, as in the registry.
    pub fn lease_id(&self) -> &str {
        &self.entry.lease_id
    }

    /// The session this lease holds.
    pub fn session_id(&self) -> &str {
        &self.entry.session_id
    }

    /// The registry entry written for this lease.
    pub fn entry(&self) -> &LeaseEntry {
        &self.entry
    }

    /// Removes this lease's entry from the registry (pruning dead ones on the way). A corrupt
    /// registry is not rewritten: the refusal is returned instead.
    pub fn release(mut self) -> Result<(), Refusal> {
        self.released = true;
        remove(&self.home, &self.entry.lease_id)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            let _ = remove(&self.home, &self.entry.lease_id);
        }
    }
}

fn remove(home: &Path, lease_id: &str) -> Result<(), Refusal> {
    let registry = Locked::open(home)?;
    let mut entries = registry.read()?;
    let before = entries.len();
    entries.retain(|e| e.lease_id != lease_id);
    let removed = entries.len() != before;
    if prune(&mut entries) || removed {
        registry.write(&entries)?;
    }
    Ok(())
}

/// Takes the lease of `session_id` for the calling process, recording its pid and start time.
/// Refused when a live lease already holds the session (even one of this process: each acquire
/// is a separate owner), when the registry is unreadable (it is then left as it is), or when a
/// positive `max_concurrent_sessions` (0 = unlimited) is already reached by live leases.
pub fn try_acquire(
    home: &Path,
    session_id: &str,
    surface: &str,
    metadata: Value,
    max_concurrent_sessions: usize,
) -> Result<Lease, Refusal> {
    let pid = std::process::id();
    let start = process_start_time(pid).ok_or_else(|| {
        unavailable(
            Path::new("/proc/self/stat"),
            "cannot read this process's start time",
        )
    })?;
    let registry = Locked::open(home)?;
    let mut entries = registry.read()?;
    let pruned = prune(&mut entries);
    let refusal = if let Some(owner) = entries.iter().find(|e| e.session_id == session_id) {
        Some(Refusal::SessionNotOwned {
            session_id: session_id.to_owned(),
            pid: owner.pid,
            surface: owner.surface.clone(),
            lease_id: owner.lease_id.clone(),
        })
    } else if max_concurrent_sessions > 0 && entries.len() >= max_concurrent_sessions {
        Some(Refusal::MaxConcurrentSessions {
            max: max_concurrent_sessions,
            live: entries.len(),
        })
    } else {
        None
    };
    if let Some(refusal) = refusal {
        if pruned {
            // Best effort: the refusal stands whether or not the pruning is saved.
            let _ = registry.write(&entries);
        }
        return Err(refusal);
    }
    let now = now_secs();
    let entry = LeaseEntry {
        lease_id: crate::sync::random_hex(16),
        session_id: session_id.to_owned(),
        surface: surface.to_owned(),
        pid,
        process_start_time: start,
        started_at: now,
        updated_at: now,
        metadata,
    };
    entries.push(entry.clone());
    registry.write(&entries)?;
    Ok(Lease {
        home: home.to_path_buf(),
        entry,
        released: false,
    })
}

/// The live leases of `home`, after pruning the dead ones from the registry.
pub fn list(home: &Path) -> Result<Vec<LeaseEntry>, Refusal> {
    let registry = Locked::open(home)?;
    let mut entries = registry.read()?;
    if prune(&mut entries) {
        registry.write(&entries)?;
    }
    Ok(entries)
}
