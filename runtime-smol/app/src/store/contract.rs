//! The store interface's contract, one suite run on both stores: SQLite in a fresh
//! `CONNOP_HOME`, and PostgreSQL in a fresh database on the server `CONNOP_TEST_DATABASE_URL`
//! names (those tests are reported ignored without it).

use super::postgres::{PgOptions, PgStore, connect};
use super::sqlite::SqliteStore;
use super::*;
use connop_core::run::{RESTART_ERROR, Run, RunChange, RunStatus};
use serde_json::json;
use std::time::Duration;

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(1_800_000_000 + s)
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (rest, query) = rest.split_once('?').map_or((rest, ""), |(r, q)| (r, q));
    let authority = rest.split('/').next().unwrap_or_default();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{scheme}://{authority}/{name}{query}")
}

/// A store under test, and what to clean up after it.
struct Subject {
    store: Arc<dyn Store>,
    signals: Arc<RunSignals>,
    cleanup: Cleanup,
}

enum Cleanup {
    Home(std::path::PathBuf),
    Database { admin: String, name: String },
}

impl Drop for Subject {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::Home(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Cleanup::Database { admin, name } => {
                let (admin, name) = (admin.clone(), name.clone());
                let store = self.store.clone();
                smol::block_on(async move {
                    let _ = store.leave().await;
                    if let Ok(client) = admin_client(&admin).await {
                        let _ = client
                            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                            .await;
                    }
                });
            }
        }
    }
}

async fn admin_client(url: &str) -> Result<tokio_postgres::Client, StoreError> {
    let options = PgOptions::from_url(url).expect("CONNOP_TEST_DATABASE_URL is a postgres URL");
    let config: tokio_postgres::Config = url.parse()?;
    let (client, connection) = connect(&config, options.target()).await?;
    smol::spawn(async move {
        let _ = connection.await;
    })
    .detach();
    Ok(client)
}

fn sqlite() -> Subject {
    let home = std::env::temp_dir().join(format!("connop-contract-{}", crate::sync::random_hex(6)));
    let signals = Arc::new(RunSignals::default());
    let store = SqliteStore::open(&home, signals.clone(), t(0)).expect("the SQLite store opens");
    Subject {
        store: Arc::new(store),
        signals,
        cleanup: Cleanup::Home(home),
    }
}

fn postgres() -> Subject {
    let admin = std::env::var("CONNOP_TEST_DATABASE_URL")
        .expect("CONNOP_TEST_DATABASE_URL names a PostgreSQL server for these tests");
    let name = format!("connop_contract_{}", crate::sync::random_hex(6));
    smol::block_on(async {
        let client = admin_client(&admin).await.expect("the test server answers");
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("a fresh database");
        let mut options = PgOptions::from_url(&with_database(&admin, &name)).unwrap();
        options.replica_id = Some("contract".into());
        let signals = Arc::new(RunSignals::default());
        let store = PgStore::open(&options, signals.clone(), Arc::default(), 0, t(0))
            .await
            .expect("the PostgreSQL store opens");
        Subject {
            store: Arc::new(store),
            signals,
            cleanup: Cleanup::Database { admin, name },
        }
    })
}

/// One contract test, run on both stores.
macro_rules! both_stores {
    ($(fn $name:ident($subject:ident: &Subject) $body:block)*) => {
        mod on_sqlite {
            use super::*;
            $(#[test] fn $name() { let $subject = &sqlite(); smol::block_on(async $body) })*
        }
        mod on_postgres {
            use super::*;
            $(
                #[test]
                #[cfg_attr(not(connop_postgres_tests), ignore = "set CONNOP_TEST_DATABASE_URL=postgres://… to run the PostgreSQL tests")]
                fn $name() { let $subject = &postgres(); smol::block_on(async $body) }
            )*
        }
    };
}

/// Every future polled together (so PostgreSQL gets them at once), answers in order.
async fn join_all<T>(futures: Vec<StoreFuture<'_, T>>) -> Vec<Result<T, StoreError>> {
    type Slot<'a, T> = (StoreFuture<'a, T>, Option<Result<T, StoreError>>);
    let mut slots: Vec<Slot<'_, T>> = futures.into_iter().map(|f| (f, None)).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, answer) in &mut slots {
            if answer.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(done) => *answer = Some(done),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    slots.into_iter().filter_map(|(_, answer)| answer).collect()
}

fn session(id: &str, created_at: f64) -> SessionRow {
    SessionRow {
        session_id: id.into(),
        title: format!("title of {id}"),
        source: "desktop".into(),
        created_at,
    }
}

fn queued(id: &str, session_id: &str) -> Run {
    Run::new(id, session_id, t(1))
}

async fn start(store: &dyn Store, run: &Run, key: Option<(&str, &FirstAnswer)>) -> Started {
    let start = NewRun {
        run,
        message: "ping",
        author: None,
        key: key.map(|(key, first)| Keyed {
            key,
            first,
            now: run.created_at(),
        }),
    };
    store.start_run(&start).await.expect("the store answers")
}

fn first(body: &str, run_id: &str) -> FirstAnswer {
    FirstAnswer {
        body: body.into(),
        status: 202,
        answer: json!({"run_id": run_id, "status": "started"}),
    }
}

both_stores! {
    fn sessions_and_messages_round_trip(s: &Subject) {
        let store = &*s.store;
        assert!(store.create_session(&session("b", 2.0)).await.unwrap());
        assert!(store.create_session(&session("a", 1.0)).await.unwrap());
        assert!(!store.create_session(&session("a", 3.0)).await.unwrap(), "the id exists");
        let listed: Vec<String> = store.sessions(None, 10).await.unwrap().rows.into_iter().map(|r| r.session_id).collect();
        assert_eq!(listed, ["a", "b"], "oldest first");
        assert_eq!(store.session("a").await.unwrap(), Some(session("a", 1.0)));
        assert_eq!(store.session("nobody").await.unwrap(), None);
        let author = json!({"id": "bot:cto", "name": "cto", "is_bot": true});
        let user = NewMessage { session_id: "a", role: "user", content: "ping", author: Some(&author), now: t(2) };
        assert!(store.begin_turn(&user).await.unwrap().is_empty());
        let reply = NewMessage { session_id: "a", role: "assistant", content: "pong", author: None, now: t(3) };
        store.add_message(&reply).await.unwrap();
        let again = NewMessage { content: "again", ..user };
        let history = store.begin_turn(&again).await.unwrap();
        let history: Vec<(&str, &str)> = history.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(history, [("user", "ping"), ("assistant", "pong")]);
    }

    fn a_run_is_stored_with_every_event_and_its_fields(s: &Subject) {
        let store = &*s.store;
        let run = queued("run_a", "fresh");
        assert_eq!(start(store, &run, None).await, Started::Run(Vec::new()));
        assert!(store.session("fresh").await.unwrap().is_some(), "its session is created");
        let stored = store.run("run_a").await.unwrap().unwrap();
        assert_eq!(stored, run);
        let watch = s.signals.watch("run_a");
        let woken = watch.listen();
        let (after, applied) = store.apply("run_a", RunChange::Start, t(2)).await.unwrap().unwrap();
        assert!(applied.changed);
        assert_eq!(after.status(), RunStatus::Running);
        smol::future::or(async { woken.await; }, async {
            smol::Timer::after(Duration::from_secs(10)).await;
            panic!("the watcher was not woken");
        }).await;
        store.apply("run_a", RunChange::Reply("pong"), t(3)).await.unwrap();
        let events = store.events("run_a", 0, u32::MAX).await.unwrap();
        let names: Vec<(u32, &str)> = events.iter().map(|e| (e.seq, e.event)).collect();
        assert_eq!(names, [(0, "run.started"), (1, "message.delta"), (2, "run.completed")]);
        assert_eq!(events[2].data, json!({"event": "run.completed", "run_id": "run_a", "timestamp": t(3).as_secs_f64(), "output": "pong"}));
        assert_eq!(store.events("run_a", 2, u32::MAX).await.unwrap(), events[2..]);
        // A page: the first `limit` from `from` on.
        assert_eq!(store.events("run_a", 0, 2).await.unwrap(), events[..2]);
        assert_eq!(store.events("run_a", 1, 1).await.unwrap(), events[1..2]);
        let done = store.run("run_a").await.unwrap().unwrap();
        assert_eq!(done.to_json()["output"], "pong");
        assert_eq!(done.event_count(), 3);
        let (unchanged, applied) = store.apply("run_a", RunChange::Interrupt(RESTART_ERROR), t(4)).await.unwrap().unwrap();
        assert!(!applied.changed);
        assert_eq!(unchanged.status(), RunStatus::Completed);
        assert!(store.apply("run_none", RunChange::Stop, t(4)).await.unwrap().is_none());
        assert!(store.run("run_none").await.unwrap().is_none());
        assert!(store.events("run_none", 0, u32::MAX).await.unwrap().is_empty());
    }

    fn concurrent_ends_of_one_run_store_one_terminal_event(s: &Subject) {
        let store = &*s.store;
        let run = queued("run_race", "s");
        start(store, &run, None).await;
        store.apply("run_race", RunChange::Start, t(2)).await.unwrap();
        let changes = [
            RunChange::Interrupt("one"),
            RunChange::Reply("two"),
            RunChange::Fail("three"),
            RunChange::Interrupt("four"),
            RunChange::Stop,
            RunChange::Stopped,
        ];
        // Connections ready for each writer, so the writes race for real.
        join_all((0..8).map(|_| store.run("run_race")).collect()).await;
        let applies = changes.iter().map(|c| store.apply("run_race", *c, t(3))).collect();
        let mut ended = 0;
        for applied in join_all(applies).await {
            let (_, applied) = applied.unwrap().unwrap();
            ended += applied.events.iter().filter(|e| e.is_terminal()).count();
        }
        let stored = store.events("run_race", 0, u32::MAX).await.unwrap();
        let terminal = stored.iter().filter(|e| e.is_terminal()).count();
        assert_eq!((ended, terminal), (1, 1), "{stored:?}");
    }

    fn an_idempotency_key_starts_one_run_and_expires_after_a_day(s: &Subject) {
        let store = &*s.store;
        let one = queued("run_one", "s");
        let answer = first("{\"input\":\"ping\"}", "run_one");
        assert!(matches!(start(store, &one, Some(("k1", &answer))).await, Started::Run(_)));
        let two = queued("run_two", "s");
        let other = first("{\"input\":\"ping\"}", "run_two");
        assert_eq!(start(store, &two, Some(("k1", &other))).await, Started::Taken(answer.clone()));
        assert!(store.run("run_two").await.unwrap().is_none(), "nothing else was written");
        assert_eq!(store.sessions(None, 10).await.unwrap().rows.len(), 1);
        let refusal = FirstAnswer { body: "{".into(), status: 400, answer: json!({"error": {"code": "invalid_json"}}) };
        let keyed = Keyed { key: "k1", first: &refusal, now: t(2) };
        assert_eq!(store.remember(&keyed).await.unwrap(), Some(answer.clone()));
        let keyed = Keyed { key: "k2", first: &refusal, now: t(2) };
        assert_eq!(store.remember(&keyed).await.unwrap(), None);
        assert_eq!(store.remember(&keyed).await.unwrap(), Some(refusal.clone()));
        // A day later the key is free again.
        let later = Run::new("run_later", "s", t(1 + 24 * 3600 + 1));
        assert!(matches!(start(store, &later, Some(("k1", &other))).await, Started::Run(_)));
        assert_eq!(store.forget_expired_keys(t(2 + 24 * 3600 + 1)).await.unwrap(), 1, "k2");
    }

    fn concurrent_requests_with_one_key_start_one_run(s: &Subject) {
        let store = &*s.store;
        let runs: Vec<Run> = (0..8).map(|i| queued(&format!("run_{i}"), "s")).collect();
        let answers: Vec<FirstAnswer> = runs.iter().map(|r| first("same", r.run_id())).collect();
        let starts: Vec<NewRun<'_>> = runs.iter().zip(&answers).map(|(run, answer)| NewRun {
            run,
            message: "ping",
            author: None,
            key: Some(Keyed { key: "once", first: answer, now: t(1) }),
        }).collect();
        join_all((0..8).map(|_| store.sessions(None, 1)).collect()).await;
        let pending = starts.iter().map(|s| store.start_run(s)).collect();
        let outcomes: Vec<Started> = join_all(pending).await.into_iter().map(|o| o.unwrap()).collect();
        let winners = outcomes.iter().filter(|o| matches!(o, Started::Run(_))).count();
        assert_eq!(winners, 1, "{outcomes:?}");
        let mut stored = 0;
        for run in &runs {
            stored += usize::from(store.run(run.run_id()).await.unwrap().is_some());
        }
        assert_eq!(stored, 1);
    }

    fn sessions_are_listed_a_page_at_a_time_in_order(s: &Subject) {
        let store = &*s.store;
        // Two share a creation time: their order is the order they were made in.
        let times = [3.0, 1.0, 2.0, 2.0, 5.0, 4.0, 6.0];
        for (i, created_at) in times.iter().enumerate() {
            assert!(store.create_session(&session(&format!("s{i}"), *created_at)).await.unwrap());
        }
        let mut seen = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = store.sessions(after.as_ref(), 3).await.unwrap();
            assert!(page.rows.len() <= 3);
            pages += 1;
            seen.extend(page.rows.into_iter().map(|r| r.session_id));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, ["s1", "s2", "s3", "s0", "s5", "s4", "s6"]);
        assert_eq!(pages, 3);
        let exact = store.sessions(None, 7).await.unwrap();
        assert_eq!((exact.rows.len(), exact.next), (7, None), "no empty page after the last");
        let cursor = SessionCursor::parse(&store.sessions(None, 6).await.unwrap().next.unwrap().encode()).unwrap();
        let last = store.sessions(Some(&cursor), 6).await.unwrap();
        assert_eq!(last.rows.iter().map(|r| r.session_id.as_str()).collect::<Vec<_>>(), ["s6"]);
    }

    fn a_turn_gets_a_bounded_window_of_the_latest_history(s: &Subject) {
        let store = &*s.store;
        let message = |content: &'static str| NewMessage { session_id: "long", role: "user", content, author: None, now: t(2) };
        let count = HISTORY_MESSAGES as usize + 20;
        let texts: Vec<String> = (0..count).map(|i| format!("m{i}")).collect();
        for text in &texts {
            let text: &'static str = Box::leak(text.clone().into_boxed_str());
            store.add_message(&message(text)).await.unwrap();
        }
        let history = store.begin_turn(&message("now")).await.unwrap();
        let got: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
        let want: Vec<&str> = texts[count - HISTORY_MESSAGES as usize..].iter().map(String::as_str).collect();
        assert_eq!(got, want, "the latest {HISTORY_MESSAGES}, oldest first");

        // By size: three messages of 40% of the budget each; the latest two fit.
        let big = |c: char| -> &'static str {
            Box::leak(c.to_string().repeat((HISTORY_BYTES as usize) * 2 / 5).into_boxed_str())
        };
        let large = |content| NewMessage { session_id: "large", ..message(content) };
        for c in ['a', 'b', 'c'] {
            store.add_message(&large(big(c))).await.unwrap();
        }
        let history = store.begin_turn(&large("now")).await.unwrap();
        let firsts: Vec<char> = history.iter().filter_map(|m| m.content.chars().next()).collect();
        assert_eq!(firsts, ['b', 'c']);
        let run = queued("run_window", "large");
        match start(store, &run, None).await {
            Started::Run(history) => {
                let firsts: Vec<char> = history.iter().filter_map(|m| m.content.chars().next()).collect();
                assert_eq!(firsts, ['b', 'c', 'n'], "a run's turn gets the same window");
            }
            other => panic!("{other:?}"),
        }
    }

    fn active_runs_are_the_unsettled_ones_and_a_ping_answers(s: &Subject) {
        let store = &*s.store;
        store.ping().await.unwrap();
        for id in ["run_q", "run_r", "run_done"] {
            start(store, &queued(id, "s"), None).await;
        }
        store.apply("run_r", RunChange::Start, t(2)).await.unwrap();
        store.apply("run_done", RunChange::Start, t(2)).await.unwrap();
        store.apply("run_done", RunChange::Reply("x"), t(3)).await.unwrap();
        let mut active = store.active_runs().await.unwrap();
        active.sort();
        assert_eq!(active, ["run_q", "run_r"]);
    }
}
