"""The compatibility layer's own seams, beyond what the original test file patches."""

from __future__ import annotations

import json
from unittest.mock import patch

from conftest import Gateway
from tools.connectors import live, managed
from tools.connectors.tool import manage_connections


class FailingMint(Gateway):
    def __init__(self, listed):
        super().__init__()
        self.listed = listed

    def list_connectors(self, *, timeout=None):
        self.lists += 1
        return [{"connector": name, "enabled": True, "connected": False} for name in self.listed]

    def connections(self, connectors, **kwargs):
        self.mints.append(kwargs)
        return {"results": [{"connector": name, "status": "failed", "status_reason": "vendor says no"}
                            for name in connectors]}


def call(gw, platform="desktop", **kwargs):
    live.reset_for_tests()
    with patch("tools.connectors.gateway.client.session_platform", return_value=platform), \
            patch("tools.connectors.operation.OPERATION_DEADLINE_SECONDS", 0.05):
        return json.loads(manage_connections({"action": "connect", "connectors": ["slack"]},
                                             client_factory=lambda: gw,
                                             connection_callback=lambda p: None,
                                             session_id="c1", **kwargs))


def test_left_in_place_hosted_names_lets_connop_read_the_gateways_list():
    with patch.object(managed, "catalog_names", return_value={"slack"}):
        listed = FailingMint(listed=["gmail", "slack"])
        out = call(listed)
        assert listed.lists == 1 and out["targets"][0]["detail"] == "vendor says no"
        unlisted = FailingMint(listed=["gmail"])
        out = call(unlisted)
        assert unlisted.lists == 1
        assert out["targets"][0]["detail"].startswith("slack is a local MCP server")


def test_the_desktop_return_to_is_the_original_apps_name(monkeypatch):
    gw = Gateway(scripts={"slack": ["active"]})
    call(gw)
    assert gw.mints[-1]["return_to"] == "hermes-desktop"
    monkeypatch.setenv("HERMES_DESKTOP_DEV_SERVER", "1")
    call(gw)
    assert gw.mints[-1]["return_to"] == "hermes-desktop-dev"
    call(gw, platform="tui")
    assert gw.mints[-1]["return_to"] is None and gw.mints[-1]["op"] is None


def test_connops_http_client_behind_the_layer_gets_the_misroute_check():
    """The layer's default client is connop's HTTP client, which has no Python methods: the
    misroute check must still read its connector list."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import connop

    seen = []

    class Api(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            seen.append(self.path)
            self._send({"items": [{"connector": "gmail", "enabled": True, "connected": False}],
                        "nextCursor": None})

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            self._send({"results": [{"connector": "slack", "status": "failed",
                                     "statusReason": "vendor says no"}]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        gateway = connop.HttpGateway(f"http://127.0.0.1:{server.server_port}", "t")
        with patch.object(managed, "catalog_names", return_value={"slack"}):
            out = call(gateway)
    finally:
        server.shutdown()
    assert any(path.startswith("/v1/connectors?") for path in seen), seen
    assert out["targets"][0]["detail"].startswith("slack is a local MCP server")


def _held_call(on_object, scripts):
    """A tool call whose card callback takes the host's object for the operation (``live.get``)
    and hands it to ``on_object``; returns the result and the object."""
    held = {}

    def card(payload):
        held["op"] = live.get("h1", payload["op_id"])
        on_object(held["op"])

    live.reset_for_tests()
    with patch.object(managed, "WATCH_TICK_SECONDS", 0.01), \
            patch("tools.connectors.gateway.client.session_platform", return_value="desktop"):
        out = json.loads(manage_connections({"action": "connect", "connectors": list(scripts)},
                                            client_factory=lambda: Gateway(scripts=scripts),
                                            connection_callback=card, session_id="h1"))
    return out, held["op"]


def test_a_held_object_that_waits_or_has_a_hook_gets_the_tool_calls_changes(monkeypatch):
    # Waiting: the object's wake is set by the changes after it was asked for.
    out, op = _held_call(lambda op: op.wake.clear(), {"gmail": ["pending", "active"]})
    assert out["settled_by"] == "all_resolved" and op.wake.is_set()

    # A replaced hook sees the tool call's moves.
    changes = []
    monkeypatch.setattr("tools.connectors.operation.ConnectionOperation.on_change",
                        staticmethod(lambda operation, change, snapshot: changes.append(change)))
    out, op = _held_call(lambda op: None, {"gmail": ["pending", "active"]})
    assert [(c["target"], c["to"]) for c in changes] == [("gmail", "connected")]


def test_a_held_object_that_neither_waits_nor_has_a_hook_costs_no_frame(monkeypatch):
    built = []
    from tools.connectors import tool
    monkeypatch.setattr(tool, "_frame", built.append)
    out, op = _held_call(lambda op: None, {"gmail": ["pending", "active"]})
    assert out["settled_by"] == "all_resolved" and built == []
    # Asked for after the changes, its wake says the operation changed since it was made.
    assert op.wake.is_set()
