"""The registry, operation handles, events and the contract's enums from Python."""

from __future__ import annotations

import os
import sys
import warnings

import pytest

import connop
from conftest import Gateway, run


def test_enums_carry_the_wire_names():
    assert connop.TargetState.not_connected.value == "not_connected"
    assert str(connop.SettleReason.continue_) == "continue"
    assert connop.Actor.backend_watcher.value == "backend_watcher"
    assert connop.Kind.connector.value == "connector"
    assert connop.TargetAction.reconnect.value == "reconnect"
    assert connop.TargetState.skipped == connop.TargetState.skipped
    assert len({connop.TargetState.skipped, connop.TargetState.skipped}) == 1


def test_a_host_opened_operation_holds_the_session_and_moves_by_its_handle(registry):
    op = registry.open("s1", ["gmail", ("notion", "connector", "connect")])
    assert len(op.op_id) == 12 and registry.current("s1") == op
    with pytest.raises(connop.OperationAlreadyOpen) as refused:
        registry.open("s1", ["slack"])
    assert refused.value.args[1] == op.op_id and "already open" in refused.value.args[0]
    out = run({"action": "connect", "connectors": ["slack"]}, Gateway(), registry=registry)
    assert op.op_id in out["error"]

    change = op.transition("gmail", connop.TargetState.initiated, connop.Actor.backend_watcher,
                           connect_url="https://c/gmail", connection_id="ca_1", detail="go")
    assert change == {"target": "gmail", "from": "pending", "to": "initiated",
                      "actor": "backend_watcher", "detail": "go"}
    assert op.transition("gmail", "initiated", "backend_watcher") is None, "a no-op"
    with pytest.raises(connop.IllegalTransition, match="gmail: initiated -> connected by user"):
        op.transition("gmail", connop.TargetState.connected, connop.Actor.user)
    with pytest.raises(connop.IllegalTransition, match="unknown target"):
        op.transition("nope", "skipped", "user")
    # One `except connop.ConnopError` catches every refusal; the value errors are both.
    with pytest.raises(connop.ConnopError) as caught:
        op.transition("gmail", connop.TargetState.connected, connop.Actor.user)
    assert isinstance(caught.value, connop.IllegalTransition)
    assert isinstance(caught.value, ValueError)
    for refusal in (connop.IllegalTransition, connop.InvalidAnswer):
        assert issubclass(refusal, connop.ConnopError) and issubclass(refusal, ValueError)
        assert refusal.__module__ == "connop" and refusal.__doc__
    with pytest.raises(ValueError):
        op.transition("gmail", "sideways", "user")
    refreshed = op.refresh("gmail", connect_url="https://c/gmail/2", detail="again")
    assert refreshed["from"] == refreshed["to"] == "initiated"

    view = op.view()
    assert view["settled"] is False and view["targets"][0]["connect_url"] == "https://c/gmail/2"
    assert view["targets"][0]["connection_id"] == "ca_1"
    live = op.result()
    assert live["settled_by"] is None and live["targets"][0]["state"] == "initiated", \
        "the result of an open operation is its current snapshot"

    with pytest.raises(connop.InvalidAnswer):
        op.respond({"targets": [{"name": "gmail", "status": "connected"}]})
    assert op.respond({"targets": [{"name": "notion", "status": "skipped"}]}) == \
        {"status": "ok", "settled": False}
    assert op.continue_() is True
    assert op.settle(connop.SettleReason.deadline) is False, "settled once"
    result = op.result()
    assert result["settled_by"] == "continue"
    assert [t["state"] for t in result["targets"]] == ["not_connected", "skipped"]
    assert result["targets"][0]["connect_url"] == "https://c/gmail/2", "links stay for the UI"
    assert registry.current("s1") is None and registry.get("s1", op.op_id) == op, "kept"
    assert '"connect_url"' not in op.tool_result()


def test_the_card_once_and_every_update_frame(registry):
    cards, frames = [], []
    gw = Gateway(scripts={"gmail": ["pending", "active"], "notion": ["active"]})
    out = run({"action": "connect", "connectors": ["gmail", "notion"]}, gw, tick=0.01,
              deadline=10.0, on_card=cards.append, on_update=frames.append,
              tool_call_id="call_1", registry=registry)
    (card,) = cards
    assert card["tool_call_id"] == "call_1" and card["timeout_seconds"] == 10.0
    assert [t["connect_url"] for t in card["targets"]] == [
        "https://connect.test/gmail/1", "https://connect.test/notion/1"]
    assert frames[-1]["settled"] is True and frames[-1]["settled_by"] == "all_resolved"
    assert "target" not in frames[-1]
    moves = [(f["target"], f["to"]) for f in frames if "target" in f]
    assert ("notion", "connected") in moves and ("gmail", "connected") in moves
    assert [f["seq"] for f in frames] == sorted(f["seq"] for f in frames)
    assert out["settled_by"] == "all_resolved"


def test_refused_arguments_and_the_process_registry():
    out = run({"action": "disconnect"}, Gateway())
    assert out["error"].startswith("action must be one of status, connect, reconnect.")
    out = run('{"action": "connect"}', Gateway())
    assert "requires 'connectors'" in out["error"]
    with pytest.raises(ValueError):
        run("not json", Gateway())
    with pytest.raises(ValueError):
        run({"action": "status"}, Gateway(), tick=-1.0)
    assert connop.current("nobody") is None and connop.get("nobody", "0123456789ab") is None
    assert connop.get("nobody", "not an id") is None


def test_open_takes_names_as_the_tool_arguments_do(registry):
    # As the tool's `connectors`: a bare name is a list of one; names trimmed and
    # lower-cased; duplicates dropped in order; an empty name refused.
    op = registry.open("bare", "gmail")
    assert [t["name"] for t in op.view()["targets"]] == ["gmail"]
    op = registry.open("mixed", [" Gmail", "notion", "gmail", ("NOTION", "connector")])
    assert [t["name"] for t in op.view()["targets"]] == ["gmail", "notion"]
    for empty in ([""], ["gmail", "  "], [("", "connector")]):
        with pytest.raises(ValueError, match="every target needs a non-empty 'name'"):
            registry.open("empty", empty)
    assert registry.current("empty") is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_repeats_its_parents_next_op_id(registry):
    # Op ids come from a per-thread pool of system random bytes; a fork must empty it, or
    # the child would hand out the parent's next ids.
    registry.open("before", ["gmail"]).settle(connop.SettleReason.interrupt)
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: we know
        pid = os.fork()
    if pid == 0:
        try:
            os.write(write, registry.open("child", ["gmail"]).op_id.encode())
        finally:
            os._exit(0)
    os.close(write)
    parent = registry.open("parent", ["gmail"]).op_id
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    assert os.waitpid(pid, 0)[1] == 0
    assert len(child) == len(parent) == 12
    assert child != parent, "the child repeated its parent's next op id"


def test_the_module_says_what_it_is():
    assert connop.__doc__ and connop.__doc__.startswith("connop: connection operations")
    assert connop.__version__


def test_a_registry_and_the_operations_it_holds_are_freed_once_the_host_drops_them():
    """An operation refers to its registry weakly: a registry dropped while it still holds an
    open operation, or a settled one it keeps readable, takes the operation with it. Before,
    each kept the other alive (about 2 to 3 KB a call, seen as a growing fuzzing process)."""
    import gc
    import weakref

    class Sentinel:
        def __call__(self, frame):
            pass

    for settle in (False, True):
        sentinel = Sentinel()
        gone = weakref.ref(sentinel)
        registry = connop.Registry()
        op = registry.open("s1", ["gmail"], on_update=sentinel)
        if settle:
            op.settle("continue")
        del sentinel, op, registry
        gc.collect()
        assert gone() is None, f"the operation outlived its registry (settled: {settle})"
