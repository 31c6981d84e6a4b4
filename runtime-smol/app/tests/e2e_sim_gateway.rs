//! `connop sim-gateway` on its own: it announces its address, requires its token on the API,
//! serves the consent page, and exits 0 on SIGTERM.

mod support;

use support::{BOUND, connop, http_get, spawn_announcing, wait_bounded};

#[test]
fn the_simulated_gateway_runs_on_its_own() {
    let mut command = connop();
    command.args(["sim-gateway", "--listen", "127.0.0.1:0", "--token", "t0ken"]);
    let (child, rx, _) = spawn_announcing(&mut command);
    let url = rx.recv_timeout(BOUND).expect("a listening line");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    assert_eq!(
        http_get(&format!("{url}/v1/connectors?limit=50")),
        401,
        "the token is required"
    );
    let request = isahc::Request::get(format!("{url}/v1/connectors?limit=50"))
        .header("Authorization", "Bearer t0ken")
        .body(())
        .unwrap();
    use isahc::ReadResponseExt;
    let mut response = isahc::send(request).expect("the list answers");
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value = serde_json::from_str(&response.text().unwrap()).unwrap();
    assert_eq!(
        body["items"].as_array().unwrap().len(),
        6,
        "the six catalog connectors"
    );
    assert_eq!(
        http_get(&format!("{url}/connect/ca_nobody_1")),
        404,
        "an unknown consent page"
    );

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert!(wait_bounded(child).success());
}
