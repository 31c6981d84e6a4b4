"""What the module gives a host that lays another system's module layout over connop: the
contract as data, operations that exist before they register, one watcher pass run by the
host, and the gateway client over the host's own HTTP transport."""

from __future__ import annotations

import json
import time

import pytest

import connop


def test_the_contract_table_is_what_allowed_answers():
    table = connop.contract_table()
    assert ["continue_", "continue"] in table["settle_reasons"]
    assert set(table["resolved"]) == {"connected", "skipped"}
    edges = {(k, f, t): a for k, f, t, a in table["edges"]}
    states = [wire for _, wire in table["states"]]
    for kind, _ in table["kinds"]:
        for f in states:
            for t in states:
                assert connop.allowed(kind, f, t) == edges.get((kind, f, t)), (kind, f, t)
    assert connop.allowed("connector", connop.TargetState.initiated, "expired") == "clock"
    with pytest.raises(ValueError):
        connop.allowed("plugin", "pending", "initiated")


def test_a_detached_operation_is_moved_by_its_host_and_registers_when_asked():
    registry = connop.Registry()
    frames = []
    op = registry.detached("s1", [{"name": "Gmail", "instructions": "Finish setup"}, "notion"],
                           tool_call_id="call-1", on_update=frames.append)
    assert registry.current("s1") is None, "not registered until asked"
    assert op.target_names() == ["gmail", "notion"]
    op.transition("gmail", "initiated", "backend_watcher", connect_url="https://l/gmail")
    assert frames[-1]["target"] == "gmail" and frames[-1]["to"] == "initiated"
    payload = op.request_payload()
    assert payload["tool_call_id"] == "call-1"
    assert payload["targets"][0]["instructions"] == "Finish setup"
    op.transition("gmail", "skipped", "user")
    op.transition("notion", "skipped", "user")
    assert op.settled is False, "only its host settles it"

    op.register()
    assert registry.current("s1") == op
    other = registry.detached("s1", ["slack"])
    with pytest.raises(connop.OperationAlreadyOpen) as refused:
        other.register()
    assert refused.value.args == (f"session 's1' already has operation {op.op_id} open", op.op_id)
    other.transition("slack", "initiated", "backend_watcher")  # it goes on, unregistered

    assert op.settle_if_all_resolved() is True and op.settle_if_all_resolved() is False
    assert registry.current("s1") is None, "closed on settle"
    other.register()
    other.close()
    other.close()
    assert registry.current("s1") is None


def test_a_profile_sees_only_its_own_sessions():
    registry = connop.Registry()
    a, b = registry.for_profile("/homes/a"), registry.for_profile("/homes/b")
    first = a.detached("s1", ["gmail"])
    first.register()
    second = registry.detached("s1", ["gmail"])
    second.register(profile="/homes/b")
    assert a.current("s1") == first and b.current("s1") == second
    assert registry.current("s1") is None
    registry.clear()
    assert a.current("s1") is None and b.current("s1") is None


class Accounts:
    def __init__(self, answers):
        self.answers = answers
        self.reads = []

    def account_status(self, connection_id, *, timeout=None):
        self.reads.append((connection_id, timeout))
        answer = self.answers[connection_id]
        if isinstance(answer, BaseException):
            raise answer
        return {"connectionId": connection_id, "connector": connection_id, "status": answer,
                "statusReason": f"{connection_id} is {answer}"}


def _two_initiated(registry):
    op = registry.detached("s1", ["gmail", "notion"])
    for name in ("gmail", "notion"):
        op.transition(name, "initiated", "backend_watcher", connection_id=name)
    return op


def test_one_watcher_pass_reads_each_live_row_once_with_the_watchers_rules():
    op = _two_initiated(connop.Registry())
    gw = Accounts({"gmail": "revoked", "notion": "active"})
    op.observe(gw)
    assert [cid for cid, _ in gw.reads] == ["gmail", "notion"]
    assert all(0 < t <= 10.0 for _, t in gw.reads)
    gmail, notion = op.target("gmail"), op.target("notion")
    assert (gmail["state"], gmail["detail"]) == ("failed", "gmail is revoked")
    assert notion["state"] == "connected"
    op.observe(gw)
    assert len(gw.reads) == 2, "neither row is live any more"


def test_a_rate_limit_raised_in_a_pass_holds_every_row_back():
    op = _two_initiated(connop.Registry())
    gw = Accounts({"gmail": connop.RateLimited("slow down", retry_after=3.0), "notion": "active"})
    before = time.time()
    op.observe(gw)
    op.observe(gw)
    assert [cid for cid, _ in gw.reads] == ["gmail"]
    for name in ("gmail", "notion"):
        assert op.target(name)["next_read_at"] >= before + 3.0


class Response:
    def __init__(self, status, body, headers=None):
        self.status_code, self._body, self.headers = status, body, headers or {}
        self.text = json.dumps(body)


class Transport:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.sent = []

    def request(self, method, url, *, headers=None, json=None, timeout=None):
        self.sent.append((method, url, dict(headers or {}), json, timeout))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _client(transport, origin="https://gw.test/"):
    return connop.TransportGateway(transport=transport, endpoint_resolver=lambda: origin,
                                   header_provider=lambda url: {"Authorization": "Bearer host"})


def test_the_transport_client_sends_connops_requests_with_the_hosts_credentials():
    transport = Transport(
        Response(200, {"results": [{"connector": "gmail", "status": "initiated",
                                    "connectUrl": "https://c/gmail", "connectionId": "ca_1"}]}),
        Response(200, {"connectionId": "ca_1", "connector": "gmail", "status": "active",
                       "label": "me", "active": True}),
        Response(404, {"error": "connection_not_found"}),
    )
    client = _client(transport)
    minted = client.connections(["gmail"], reinitiate=True)
    assert minted == {"results": [{"connector": "gmail", "status": "initiated",
                                   "connect_url": "https://c/gmail", "connection_id": "ca_1"}]}
    method, url, headers, body, _ = transport.sent[0]
    assert (method, url) == ("POST", "https://gw.test/v1/connectors/connections")
    assert body == {"connectors": ["gmail"], "reinitiate": True}
    assert headers["Authorization"] == "Bearer host"
    assert client.account_status("ca_1", timeout=2.5)["status"] == "active"
    assert transport.sent[1][:2] == ("GET", "https://gw.test/v1/connectors/accounts/ca_1")
    assert transport.sent[1][4] == 2.5
    assert client.account_status("ca_1") is None


def test_the_transport_clients_failures_are_connops():
    limited = _client(Transport(Response(429, {}, headers={"Retry-After": "4"})))
    with pytest.raises(connop.RateLimited) as caught:
        limited.account_status("ca_1")
    assert caught.value.retry_after == 4.0
    stalled = Transport(TimeoutError("stalled"), TimeoutError("stalled"))
    with pytest.raises(connop.ConnopError, match="timed out"):
        _client(stalled).account_status("ca_1", timeout=0.5)
    assert len(stalled.sent) == 1, "a read that timed out spent its time: it is not sent again"
    refused = Transport(ConnectionRefusedError("refused"), ConnectionRefusedError("refused"))
    with pytest.raises(connop.ConnopError):
        _client(refused).account_status("ca_1", timeout=0.5)
    assert len(refused.sent) == 2, "a read that failed early is retried once"
    with pytest.raises(connop.ConnopError, match="no connector gateway endpoint"):
        _client(Transport(), origin=None).list_connectors()


def test_the_tool_runs_over_the_transport_client():
    transport = Transport(
        Response(200, {"results": [{"connector": "gmail", "status": "initiated",
                                    "connectUrl": "https://c/gmail", "connectionId": "ca_1"}]}),
    )
    out = json.loads(connop.manage_connections(
        {"action": "connect", "connectors": ["gmail"]}, session_key="s1",
        gateway=_client(transport), surface="cli", registry=connop.Registry()))
    assert out["status"] == "initiated"
    assert out["targets"][0]["connect_url"] == "https://c/gmail"


def test_a_target_made_with_its_environment_requirements_shows_them():
    from tools.connectors import operation as op

    operation = op.ConnectionOperation(
        [op.Target("Linear", "mcp", "install", required_env=[{"name": "KEY", "required": True}])])
    assert operation.target("linear").required_env == [{"name": "KEY", "required": True}]
    assert operation.request_payload()["targets"][0]["required_env"][0]["name"] == "KEY"
