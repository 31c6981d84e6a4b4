"""Gateway objects that misbehave: an exception or an answer of the wrong shape is a failure
of that one call, never a crash; and connop's own HTTP client driven from Python."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import connop
from conftest import Gateway, run

CONNECT = {"action": "connect", "connectors": ["gmail"]}
FAILED = "The connector gateway request failed: "


class Raising(Gateway):
    def __init__(self, method, error, **kwargs):
        super().__init__(**kwargs)
        self.method, self.error = method, error

    def __getattribute__(self, name):
        if name == object.__getattribute__(self, "method"):
            error = object.__getattribute__(self, "error")

            def raiser(*args, **kwargs):
                raise error
            return raiser
        return object.__getattribute__(self, name)


def test_an_exception_from_the_mint_ends_the_call_with_the_gateway_error(registry):
    out = run(CONNECT, Raising("connections", RuntimeError("mint exploded")), registry=registry)
    assert out["error"].startswith(FAILED), out
    assert "mint exploded" in out["error"]
    assert registry.current("s1") is None, "closed without settling"


def test_an_exception_from_an_account_read_moves_nothing_and_the_watcher_reads_again(registry):
    gw = Gateway(scripts={"gmail": [ConnectionError("reset"), "active"]})
    out = run(CONNECT, gw, tick=0.01, deadline=10.0, registry=registry)
    assert out["settled_by"] == "all_resolved"
    assert out["targets"][0]["state"] == "connected"
    assert len(gw.reads) == 2


def test_an_exception_from_the_list_is_the_status_actions_error(registry):
    out = run({"action": "status"}, Raising("list_connectors", ValueError("no list")),
              registry=registry)
    assert out["error"].startswith(FAILED) and "no list" in out["error"]


def test_a_missing_method_is_a_failed_call(registry):
    class NoMint:
        def list_connectors(self, *, timeout=None):
            return []
    out = run(CONNECT, NoMint(), registry=registry)
    assert out["error"].startswith(FAILED) and "connections" in out["error"]


@pytest.mark.parametrize("answer", [42, "results", {"results": "nope"}, {"no": "results"},
                                    {"results": [{"connector": "gmail", "status": "weird"}]},
                                    {"results": [{"status": "initiated"}]},
                                    {"results": [{"connector": "gmail", "status": "initiated",
                                                  "connect_url": 7}]},
                                    {"results": [object()]}])
def test_a_mint_answer_of_the_wrong_shape_is_an_invalid_response(registry, answer):
    class Odd(Gateway):
        def connections(self, connectors, **kwargs):
            return answer
    out = run(CONNECT, Odd(), registry=registry)
    assert out["error"].startswith(FAILED), out
    assert registry.current("s1") is None


@pytest.mark.parametrize("answer", ["active", 1, ["active"], {"status": "active"},
                                    {"connectionId": "x", "connector": "gmail", "status": "zombie"}])
def test_an_account_answer_of_the_wrong_shape_moves_nothing(registry, answer):
    class Odd(Gateway):
        def account_status(self, connection_id, **kwargs):
            self.reads.append((connection_id, kwargs.get("timeout")))
            return answer
    gw = Odd()
    out = run(CONNECT, gw, tick=0.01, deadline=0.2, registry=registry)
    assert out["settled_by"] == "deadline"
    assert out["targets"][0]["state"] == "not_connected"
    assert len(gw.reads) >= 2, "the watcher kept reading"


def test_list_rows_are_returned_verbatim_and_odd_rows_are_refused(registry):
    class Listing(Gateway):
        def list_connectors(self, *, timeout=None):
            return [{"connector": "gmail", "enabled": True, "connected": False, "extra": [1, 2]}]
    out = run({"action": "status"}, Listing(), registry=registry)
    assert out["connectors"] == [{"connector": "gmail", "enabled": True, "connected": False,
                                  "extra": [1, 2]}]

    class Odd(Gateway):
        def list_connectors(self, *, timeout=None):
            return [{"connector": "gmail", "connected": "yes"}]
    out = run({"action": "status"}, Odd(), registry=registry)
    assert out["error"].startswith(FAILED)


def test_the_mint_gets_the_original_clients_arguments(registry):
    gw = Gateway(scripts={"gmail": ["active"]})
    run({"action": "connect", "connectors": ["gmail"]}, gw, desktop_return_to="host-app",
        registry=registry)
    (mint,) = gw.mints
    assert mint["connectors"] == ("gmail",) and mint["reinitiate"] is False
    assert mint["return_to"] == "host-app" and len(mint["op"]) == 12
    (read,) = gw.reads
    assert 1.0 <= read[1] <= 10.0, "the account read's timeout is clamped to [1 s, 10 s]"

    gw = Gateway()
    out = run({"action": "connect", "connectors": ["gmail"]}, gw, card=False, surface="cli",
              registry=registry)
    assert gw.mints[0]["return_to"] is None and gw.mints[0]["op"] is None
    assert out["targets"][0]["connect_url"] == "https://connect.test/gmail/1"


class _Api(BaseHTTPRequestHandler):
    """A tool gateway on loopback: mints a link, answers the account active."""

    seen: list = []

    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("POST", self.path, self.headers.get("Authorization"), body))
        self._send(200, {"results": [{"connector": c, "status": "initiated",
                                      "connectUrl": f"http://x/{c}", "connectionId": f"ca_{c}"}
                                     for c in body["connectors"]]})

    def do_GET(self):
        self.seen.append(("GET", self.path, self.headers.get("Authorization"), None))
        connector = self.path.rsplit("_", 1)[-1]
        self._send(200, {"connectionId": f"ca_{connector}", "connector": connector,
                         "status": "active", "label": "a", "active": True,
                         "createdAt": "", "updatedAt": ""})


def test_connops_http_client_from_python(registry):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        gateway = connop.HttpGateway(f"http://127.0.0.1:{server.server_port}/", "tok")
        assert gateway.url == f"http://127.0.0.1:{server.server_port}"
        assert "tok" not in repr(gateway)
        out = run(CONNECT, gateway, tick=0.01, deadline=10.0, registry=registry)
    finally:
        server.shutdown()
    assert out["settled_by"] == "all_resolved" and out["targets"][0]["state"] == "connected"
    mint = next(s for s in _Api.seen if s[0] == "POST")
    assert mint[1] == "/v1/connectors/connections" and mint[2] == "Bearer tok"
    assert mint[3]["returnTo"] == "connop-desktop"
    assert ("GET", "/v1/connectors/accounts/ca_gmail", "Bearer tok", None) in _Api.seen


class Slow(Gateway):
    """Every account read takes ``seconds`` (a gateway object that calls a real service)."""

    def __init__(self, seconds, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def account_status(self, connection_id, *, timeout=None):
        import time
        time.sleep(self.seconds)
        return super().account_status(connection_id, timeout=timeout)


def test_a_slow_read_does_not_hold_back_the_deadline(registry):
    # The deadline fires on its own timer, whatever reads are in flight.
    import time
    started = time.monotonic()
    out = run(CONNECT, Slow(3.0), tick=0.01, deadline=0.5, registry=registry)
    elapsed = time.monotonic() - started
    assert out["settled_by"] == "deadline", out
    assert elapsed < 2.0, f"waited for the read: {elapsed:.2f} s"


def test_an_interrupt_and_a_card_answer_do_not_wait_for_a_slow_read(registry):
    import time
    for how in ("interrupt", "answer"):
        token = connop.Interrupt()
        carded = threading.Event()
        out = {}

        def call():
            out["result"] = run(CONNECT, Slow(3.0), session_key=f"s-{how}", tick=0.01,
                                deadline=30.0, registry=registry, interrupt=token,
                                on_card=lambda card: carded.set())
        thread = threading.Thread(target=call)
        thread.start()
        assert carded.wait(10), "the card"
        time.sleep(0.1)  # the first read is out now
        started = time.monotonic()
        if how == "interrupt":
            token.trigger()
        else:
            registry.current(f"s-{how}").respond({"targets": [{"name": "gmail", "status": "skipped"}]})
        answered = time.monotonic() - started
        thread.join(10)
        returned = time.monotonic() - started
        assert answered < 1.0, f"{how} waited for the read: {answered:.2f} s"
        assert returned < 1.5, f"{how}: the call waited for the read: {returned:.2f} s"
        expected = "interrupt" if how == "interrupt" else "all_resolved"
        assert out["result"]["settled_by"] == expected, out


def test_the_card_and_the_frames_run_on_the_waiting_thread_while_calls_run_off_it(registry):
    # Hosts tell a tool call's callbacks apart by thread (the original's interrupts are kept
    # per thread): the answers are fed where the call waits, whatever thread ran the read.
    class Noting(Gateway):
        def account_status(self, connection_id, *, timeout=None):
            self.read_on = threading.get_ident()
            return super().account_status(connection_id, timeout=timeout)

    gw = Noting(scripts={"gmail": ["pending", "active"]})
    seen = set()
    out = run(CONNECT, gw, tick=0.01, deadline=10.0, registry=registry,
              on_card=lambda card: seen.add(threading.get_ident()),
              on_update=lambda frame: seen.add(threading.get_ident()))
    assert out["settled_by"] == "all_resolved", out
    assert seen == {threading.get_ident()}
    assert gw.read_on != threading.get_ident(), "reads run off the waiting thread"
