//! The PostgreSQL tests run when `CONNOP_TEST_DATABASE_URL` names a server, the tests that
//! stop and start a server of their own when the distribution's PostgreSQL binaries are
//! installed (`/usr/lib/postgresql/*/bin/pg_ctl`), and the browser test when
//! `CONNOP_BROWSER_TESTS=1`; otherwise they are reported as ignored, with the reason, so a
//! run without them says so instead of passing them silently.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(connop_postgres_tests)");
    println!("cargo::rerun-if-env-changed=CONNOP_TEST_DATABASE_URL");
    println!("cargo::rustc-check-cfg=cfg(connop_browser_tests)");
    println!("cargo::rerun-if-env-changed=CONNOP_BROWSER_TESTS");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(connop_postgres_server_tests)");
    // A path that does not exist would run this script on every build: watch its parent then.
    let installed = std::path::Path::new("/usr/lib/postgresql").exists();
    let watched = if installed {
        "/usr/lib/postgresql"
    } else {
        "/usr/lib"
    };
    println!("cargo::rerun-if-changed={watched}");
    let server = std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
        versions
            .filter_map(Result::ok)
            .any(|v| v.path().join("bin").join("pg_ctl").exists())
    });
    if server {
        println!("cargo::rustc-cfg=connop_postgres_server_tests");
    }
    if std::env::var_os("CONNOP_BROWSER_TESTS").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=connop_browser_tests");
    }
    if std::env::var_os("CONNOP_TEST_DATABASE_URL").is_some_and(|url| !url.is_empty()) {
        println!("cargo::rustc-cfg=connop_postgres_tests");
    }
}
