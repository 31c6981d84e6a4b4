"""The compatibility layer behaves as the original system's modules do where the seed's era
pins them: the inline read loop, a raised rate limit, the order of checks at the entry point,
the live result, target names and the exact texts."""

from __future__ import annotations

import json
import threading
import time
from unittest.mock import patch

import pytest

import connop
from conftest import Gateway
from tools.connectors import live
from tools.connectors.tool import manage_connections

NOUS_PORTAL = ". If this persists, the user can manage connections in the Nous Portal."


@pytest.fixture(autouse=True)
def _clean_live():
    live.reset_for_tests()
    yield
    live.reset_for_tests()


def _call(args, gw, *, platform="desktop", callback=None, tick=0.0, deadline=None, **kwargs):
    patches = [patch("tools.connectors.managed.WATCH_TICK_SECONDS", tick),
               patch("tools.connectors.gateway.client.session_platform", return_value=platform)]
    if deadline is not None:
        patches.append(patch("tools.connectors.operation.OPERATION_DEADLINE_SECONDS", deadline))
    for p in patches:
        p.start()
    try:
        return json.loads(manage_connections(args, client_factory=lambda: gw,
                                             connection_callback=callback, session_id="s1",
                                             **kwargs))
    finally:
        for p in reversed(patches):
            p.stop()


class SlowReads(Gateway):
    """Every account read takes its whole timeout and answers pending."""

    def account_status(self, connection_id, *, timeout=None):
        with self.lock:
            self.reads.append((connection_id, timeout))
        time.sleep(timeout or 0)
        return {"connectionId": connection_id, "connector": connection_id.split("_")[1],
                "status": "pending", "label": "x", "active": False}


def test_inline_reads_check_the_deadline_before_each_row():
    """One tick's reads run one after another on the tool call's thread: once a slow read
    used the time left, the next row is not read and the operation settles at its deadline."""
    gw = SlowReads()
    started = time.monotonic()
    out = _call({"action": "connect", "connectors": ["gmail", "notion"]}, gw,
                callback=lambda p: None, tick=0.01, deadline=1.5)
    elapsed = time.monotonic() - started
    assert out["settled_by"] == "deadline"
    assert [cid for cid, _ in gw.reads] == ["ca_gmail_1"]
    assert elapsed < 2.0


def test_the_module_inline_loop_gives_each_read_the_time_then_left():
    """The second row's read is given the time left when it starts, not when the tick began."""
    class FirstSlow(SlowReads):
        def account_status(self, connection_id, *, timeout=None):
            with self.lock:
                self.reads.append((connection_id, timeout))
                first = len(self.reads) == 1
            time.sleep(0.6 if first else 0)
            return {"connectionId": connection_id, "connector": connection_id.split("_")[1],
                    "status": "pending", "label": "x", "active": False}

    gw = FirstSlow()
    out = json.loads(connop.manage_connections(
        {"action": "connect", "connectors": ["gmail", "notion"]}, session_key="s1", gateway=gw,
        surface="desktop", on_card=lambda p: None, tick=10.0, deadline=1.8, calls="inline",
        registry=connop.Registry()))
    assert out["settled_by"] == "deadline"
    (first, t1), (second, t2) = gw.reads[:2]
    assert (first, second) == ("ca_gmail_1", "ca_notion_1")
    assert t1 == pytest.approx(1.8, abs=0.05)
    assert t2 == pytest.approx(1.2, abs=0.1)


def test_a_rate_limit_raised_by_a_gateway_object_backs_off_every_row():
    from tools.connectors.gateway.errors import RateLimited

    class Limited(Gateway):
        def account_status(self, connection_id, *, timeout=None):
            with self.lock:
                self.reads.append((connection_id, timeout))
            raise RateLimited("slow down", retry_after=5.0)

    gw = Limited()
    out = _call({"action": "connect", "connectors": ["gmail", "notion"]}, gw,
                callback=lambda p: None, tick=0.0, deadline=0.6)
    assert out["settled_by"] == "deadline"
    assert len(gw.reads) == 1, gw.reads


def test_a_rate_limit_of_the_module_backs_off_like_a_429():
    class Limited(Gateway):
        def account_status(self, connection_id, *, timeout=None):
            with self.lock:
                self.reads.append((connection_id, timeout))
            raise connop.RateLimited("slow down", retry_after=5.0)

    gw = Limited()
    out = json.loads(connop.manage_connections(
        {"action": "connect", "connectors": ["gmail"]}, session_key="s1", gateway=gw,
        surface="desktop", on_card=lambda p: None, tick=0.0, deadline=0.6,
        registry=connop.Registry()))
    assert out["settled_by"] == "deadline"
    assert len(gw.reads) == 1, gw.reads


def test_arguments_are_refused_before_the_client_is_built():
    built = []

    def factory():
        built.append(1)
        return Gateway()

    out = json.loads(manage_connections({"action": "uninstall", "connectors": ["gmail"]},
                                        client_factory=factory))
    assert "action must be one of" in out["error"]
    out = json.loads(manage_connections({"action": "connect"}, client_factory=factory))
    assert "requires 'connectors'" in out["error"]
    assert built == []


def test_a_client_factory_that_raises_is_the_gateway_error():
    def exploding():
        raise RuntimeError("gateway on fire")

    out = json.loads(manage_connections({"action": "status"}, client_factory=exploding))
    assert out == {"error": "The connector gateway request failed: gateway on fire" + NOUS_PORTAL}
    assert live.current("s1") is None


def test_the_result_of_a_live_operation_is_its_current_snapshot():
    seen = {}

    def cb(payload):
        operation = live.get("s1", payload["op_id"])
        seen["result"] = operation.result()

    gw = Gateway(scripts={"gmail": ["active"]})
    out = _call({"action": "connect", "connectors": ["gmail"]}, gw, callback=cb)
    assert out["settled_by"] == "all_resolved"
    live_result = seen["result"]
    assert live_result["op_id"] == out["op_id"]
    assert live_result["settled_by"] is None
    (target,) = live_result["targets"]
    assert target["state"] == "initiated"
    assert target["connect_url"] == "https://connect.test/gmail/1"


def test_target_names_are_normalised_as_the_original_does():
    gw = Gateway()
    out = _call({"action": " CONNECT ",
                 "connectors": [" Gmail ", {"name": "NOTION"}, "gmail", {"name": " notion "}]},
                gw, platform="cli")
    assert [t["name"] for t in out["targets"]] == ["gmail", "notion"]
    assert [m["connectors"] for m in gw.mints] == [("gmail", "notion")]
    out = _call({"action": "reconnect", "connectors": {"name": "Slack", "mcp": False}}, Gateway(),
                platform="cli")
    assert [t["name"] for t in out["targets"]] == ["slack"]
    out = _call({"action": "connect", "connectors": "Slack"}, Gateway(), platform="cli")
    assert [t["name"] for t in out["targets"]] == ["slack"]


ACTIONS = ("action must be one of status, connect, reconnect, install, enable, authorize. "
           "install, enable, authorize apply to local MCP servers (targets {\"name\": ..., "
           "\"mcp\": true}); the rest apply to managed connectors. Disconnecting an account is "
           "done by the user in the Nous Portal dashboard, not through this tool.")


@pytest.mark.parametrize("args, text", [
    ({"action": "uninstall", "connectors": ["gmail"]}, ACTIONS),
    ({"action": "wait"}, ACTIONS),
    ({"action": "connect", "connectors": 5},
     "'connectors' must be a list of names or {name, mcp} objects."),
    ({"action": "connect", "connectors": [{"name": "gmail", "url": "x", "token": "y"}]},
     "unknown target field(s) token, url: a target is {\"name\": \"<slug>\"} or "
     "{\"name\": \"<server>\", \"mcp\": true}. Transport, URLs and credentials come from the "
     "catalog manifest, never from the call."),
    ({"action": "connect", "connectors": [{"name": "  "}]},
     "every target needs a non-empty 'name'."),
    ({"action": "install", "connectors": ["linear", "Notion"]},
     "'install' is an MCP action: every target must carry \"mcp\": true (got managed "
     "connector(s) linear, notion). Managed connectors use connect / reconnect / status."),
    ({"action": "enable"},
     "'enable' requires 'connectors': the MCP server name(s), e.g. [{\"name\": \"linear\", "
     "\"mcp\": true}]."),
    ({"action": "connect", "connectors": [{"name": "linear", "mcp": True}, "gmail"]},
     "'connect' is a managed-connector action; MCP targets (linear) use install, enable, "
     "authorize."),
    ({"action": "reconnect"},
     "'reconnect' requires 'connectors': the connector slugs to authorize (e.g. [\"gmail\"]). "
     "Use action 'status' to list them."),
])
def test_the_tools_refusals_are_the_originals_texts(args, text):
    gw = Gateway()
    out = json.loads(manage_connections(args, client_factory=lambda: gw))
    assert out == {"error": text}
    assert gw.mints == [] and gw.lists == 0


def test_a_failed_mint_is_the_originals_gateway_text():
    class NoMint(Gateway):
        def connections(self, connectors, **kwargs):
            raise RuntimeError("mint exploded")

    out = _call({"action": "connect", "connectors": ["gmail"]}, NoMint(), callback=lambda p: None)
    assert out["error"].endswith(NOUS_PORTAL)


def test_a_misrouted_target_gets_the_originals_text():
    class Failing(Gateway):
        def connections(self, connectors, **kwargs):
            return {"results": [{"connector": c, "status": "failed"} for c in connectors]}

    with patch("tools.connectors.managed.catalog_names", return_value={"linear"}), \
            patch("tools.connectors.managed.hosted_names", return_value=set()):
        out = _call({"action": "connect", "connectors": ["linear"]}, Failing(),
                    callback=lambda p: None)
    assert out["targets"][0]["detail"] == (
        "linear is a local MCP server, not a hosted connector account. Call manage_connections "
        "with action install and connectors [{\"name\": \"linear\", \"mcp\": true}].")


def test_the_module_keeps_connops_own_texts_by_default():
    """The original's words are the layer's; a host of the module gets connop's."""
    out = json.loads(connop.manage_connections({"action": "uninstall"}, session_key="s1",
                                               gateway=Gateway(), registry=connop.Registry()))
    assert out["error"].startswith("action must be one of status, connect, reconnect. ")
    assert "connector portal" in out["error"]


def test_any_chat_platform_of_the_original_is_a_surface_without_a_card():
    seen = []
    gw = Gateway()
    out = _call({"action": "connect", "connectors": ["gmail"]}, gw, platform=" Telegram ",
                callback=seen.append)
    assert out["status"] == "initiated" and out["targets"][0]["connect_url"]
    assert seen == [], "no card on a chat platform"


def test_a_subclass_that_overrides_transition_keeps_its_override():
    from tools.connectors import contract as c
    from tools.connectors.operation import ConnectionOperation

    seen = []

    class Audited(ConnectionOperation):
        def transition(self, name, to, actor, **fields):
            seen.append((name, to))
            return super().transition(name, to, actor, **fields)

    plain = ConnectionOperation(["gmail"], session_key="bind-plain")
    audited = Audited(["gmail"], session_key="bind-audited")
    assert plain.transition("gmail", c.TargetState.skipped, c.Actor.user)["to"] == "skipped"
    assert audited.transition("gmail", c.TargetState.skipped, c.Actor.user)["to"] == "skipped"
    assert seen == [("gmail", c.TargetState.skipped)]
    # A patch of the object itself reaches it.
    with patch.object(plain, "transition", return_value="patched"):
        assert plain.transition("gmail", c.TargetState.pending, c.Actor.user) == "patched"
