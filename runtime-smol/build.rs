//! The PostgreSQL tests run when `CONNOP_TEST_DATABASE_URL` names a server, and the browser
//! test when `CONNOP_BROWSER_TESTS=1`; otherwise they are reported as ignored, with the
//! reason, so a run without them says so instead of passing them silently.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(connop_postgres_tests)");
    println!("cargo::rerun-if-env-changed=CONNOP_TEST_DATABASE_URL");
    println!("cargo::rustc-check-cfg=cfg(connop_browser_tests)");
    println!("cargo::rerun-if-env-changed=CONNOP_BROWSER_TESTS");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var_os("CONNOP_BROWSER_TESTS").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=connop_browser_tests");
    }
    if std::env::var_os("CONNOP_TEST_DATABASE_URL").is_some_and(|url| !url.is_empty()) {
        println!("cargo::rustc-cfg=connop_postgres_tests");
    }
}
