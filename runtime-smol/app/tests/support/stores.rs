//! The two stores the HTTP API's tests run on: SQLite in a fresh `CONNOP_HOME`, and
//! PostgreSQL in a fresh database on the server `CONNOP_TEST_DATABASE_URL` names. Without that
//! variable the PostgreSQL variants are reported ignored, with the reason
//! ([`on_both_stores!`]).

use connop_app::store::postgres::{PgOptions, connect};
use std::path::{Path, PathBuf};

/// Which store a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// `CONNOP_HOME/state.db`.
    Sqlite,
    /// A fresh database on `CONNOP_TEST_DATABASE_URL`'s server.
    Postgres,
}

/// Generates each test twice, `sqlite::name` and `postgres::name`; the body sees the kind as
/// the given binding.
#[macro_export]
macro_rules! on_both_stores {
    ($( $(#[$meta:meta])* fn $name:ident($kind:ident: StoreKind) $body:block )*) => {
        mod sqlite {
            #[allow(unused_imports)]
            use super::*;
            $( $(#[$meta])* #[test] fn $name() { let $kind = StoreKind::Sqlite; $body } )*
        }
        mod postgres {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$meta])*
                #[test]
                #[cfg_attr(
                    not(connop_postgres_tests),
                    ignore = "set CONNOP_TEST_DATABASE_URL=postgres://… to run the PostgreSQL tests"
                )]
                fn $name() { let $kind = StoreKind::Postgres; $body }
            )*
        }
    };
}

/// A test's state: its `CONNOP_HOME`, and with PostgreSQL its own database and replica id.
/// Gateways started on the same place share its store; the database is dropped at the end.
pub struct Place {
    /// `CONNOP_HOME`.
    pub home: PathBuf,
    database: Option<TestDatabase>,
}

impl Place {
    /// A fresh place on `kind`.
    pub fn new(kind: StoreKind) -> Self {
        let home =
            std::env::temp_dir().join(format!("connop-store-{}", connop_app::sync::random_hex(6)));
        std::fs::create_dir_all(&home).expect("a CONNOP_HOME");
        Place {
            home,
            database: (kind == StoreKind::Postgres).then(TestDatabase::create),
        }
    }

    /// The `connop gateway` arguments that put the store here, for the replica named `replica`
    /// (ignored with SQLite).
    pub fn store_args(&self, replica: &str) -> Vec<String> {
        match &self.database {
            Some(db) => vec![
                "--database-url".into(),
                db.url.clone(),
                "--replica-id".into(),
                replica.into(),
            ],
            None => Vec::new(),
        }
    }

    /// The first column of each row `sql` answers on this place's database (PostgreSQL).
    pub fn query(&self, sql: &str) -> Vec<String> {
        let db = self.database.as_ref().expect("a PostgreSQL place");
        on_server(&db.url, |client| async move {
            let messages = client
                .simple_query(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            messages
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        Some(row.get(0).unwrap_or("NULL").to_owned())
                    }
                    _ => None,
                })
                .collect()
        })
    }

    /// Where `CONNOP_HOME` is.
    pub fn home(&self) -> &Path {
        &self.home
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// A database of its own on the test server.
struct TestDatabase {
    admin: String,
    name: String,
    url: String,
}

/// The test server's URL.
pub fn server_url() -> String {
    std::env::var("CONNOP_TEST_DATABASE_URL")
        .expect("CONNOP_TEST_DATABASE_URL names a PostgreSQL server for these tests")
}

/// `url` with its database replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url
        .split_once("://")
        .expect("CONNOP_TEST_DATABASE_URL is a postgres:// URL");
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = rest.split('/').next().unwrap_or_default();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{scheme}://{authority}/{name}{query}")
}

/// Runs `work` with a client of the database at `url`.
fn on_server<T, F: std::future::Future<Output = T>>(
    url: &str,
    work: impl FnOnce(std::rc::Rc<tokio_postgres::Client>) -> F,
) -> T {
    smol::block_on(async {
        let options = PgOptions::from_url(url).expect("a postgres URL");
        let config: tokio_postgres::Config = url.parse().expect("a postgres URL");
        let (client, connection) = connect(&config, options.target())
            .await
            .expect("the test server answers");
        let driver = smol::spawn(async move {
            let _ = connection.await;
        });
        let client = std::rc::Rc::new(client);
        let answer = work(client.clone()).await;
        drop(client);
        driver.await;
        answer
    })
}

/// Runs `sql` on the database at `url` (statements without parameters).
pub fn admin(url: &str, sql: &str) {
    on_server(url, |client| async move {
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    })
}

impl TestDatabase {
    fn create() -> Self {
        let admin = server_url();
        let name = format!("connop_test_{}", connop_app::sync::random_hex(6));
        self::admin(&admin, &format!("CREATE DATABASE {name}"));
        let url = with_database(&admin, &name);
        TestDatabase { admin, name, url }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let drop_it = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let admin_url = self.admin.clone();
        // Never a second panic while a failing test unwinds.
        let _ = std::panic::catch_unwind(move || admin(&admin_url, &drop_it));
    }
}
