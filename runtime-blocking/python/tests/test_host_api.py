"""The module as a host developer meets it: wrong arguments are refused at the call with the
argument's name and what it takes, a card that cannot be shown ends the call at once, a
settled operation stays readable, and the documentation stands on its own."""

from __future__ import annotations

import inspect
import json
import os
import time

import pytest

import connop
from conftest import Gateway, run

CONNECT = {"action": "connect", "connectors": ["gmail", "notion"]}
PYI = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "connop.pyi")


# ----- HttpGateway: the token is part of the signature ------------------------------------

def test_http_gateway_without_a_token_is_refused_when_built():
    with pytest.raises(TypeError, match="token"):
        connop.HttpGateway("https://gateway.example")
    for empty in ("", "   "):
        with pytest.raises(ValueError, match="token must be the gateway's bearer token"):
            connop.HttpGateway("https://gateway.example", empty)
    for url in ("gateway.example", "ftp://gateway.example", "https://", ""):
        with pytest.raises(ValueError, match="url must be the gateway's http:// or https:// URL"):
            connop.HttpGateway(url, "t")
    gateway = connop.HttpGateway(url="https://gateway.example/", token="t")
    assert gateway.url == "https://gateway.example"


def test_http_gateway_from_the_environment_names_its_variables(monkeypatch):
    monkeypatch.delenv("CONNECTOR_GATEWAY_URL", raising=False)
    assert connop.HttpGateway.from_env() is None
    monkeypatch.setenv("CONNECTOR_GATEWAY_URL", "https://gateway.example")
    monkeypatch.setenv("CONNECTOR_GATEWAY_TOKEN", "t")
    assert connop.HttpGateway.from_env().url == "https://gateway.example"


# ----- surface -----------------------------------------------------------------------------

@pytest.mark.parametrize("surface, meant", [("Desktop", "desktop"), ("dekstop", "desktop"),
                                            ("slack", None), ("TUI", "tui")])
def test_an_unknown_surface_is_a_value_error_naming_the_surfaces(registry, surface, meant):
    cards = []
    gw = Gateway()
    with pytest.raises(ValueError) as refused:
        run(CONNECT, gw, surface=surface, on_card=cards.append, registry=registry)
    message = str(refused.value)
    assert message.startswith("surface must be '' (unset"), message
    for name in ("'desktop'", "'tui'", "'cli'", "'messaging'", repr(surface)):
        assert name in message, message
    assert (f"did you mean '{meant}'?" in message) == (meant is not None), message
    assert gw.mints == [] and cards == [], "refused before anything ran"


def test_the_messaging_surface_returns_links_without_a_card(registry):
    cards = []
    out = run(CONNECT, Gateway(), surface="messaging", on_card=cards.append, registry=registry)
    assert out["status"] == "initiated" and cards == []
    assert [t["connect_url"] for t in out["targets"]] == ["https://connect.test/gmail/1",
                                                          "https://connect.test/notion/1"]


# ----- gateway, callbacks, tick ------------------------------------------------------------

@pytest.mark.parametrize("gateway, says", [
    (None, "not None"),
    ("https://gateway.example", "pass connop.HttpGateway(url, token)"),
    (Gateway, "pass an instance: Gateway(...)"),
    (object(), "a object has none of them"),
    (42, "a int has none of them"),
])
def test_a_gateway_of_the_wrong_kind_is_a_type_error(registry, gateway, says):
    with pytest.raises(TypeError) as refused:
        connop.manage_connections(CONNECT, session_key="s", gateway=gateway, registry=registry)
    message = str(refused.value)
    assert message.startswith("gateway must be a connop.HttpGateway or an object with the "
                              "methods list_connectors, connections and account_status"), message
    assert says in message, message


def test_a_gateway_factory_is_called_only_once_the_arguments_pass(registry):
    built = []

    def factory():
        built.append(Gateway())
        return built[-1]

    def call(args, **kwargs):
        return connop.manage_connections(args, session_key="s", gateway_factory=factory,
                                         surface="cli", registry=registry, **kwargs)

    bad = {"action": "explode", "connectors": ["gmail"]}
    assert call(bad) == connop.check_args(bad)
    assert call(CONNECT, available=False) == connop.check_args(CONNECT, available=False)
    assert built == [], "a refused call builds no client"
    out = json.loads(call(CONNECT))
    assert out["status"] == "initiated"
    assert len(built) == 1 and [m["connectors"] for m in built[0].mints] == [("gmail", "notion")]


def test_a_gateway_factory_that_raises_is_the_gateway_failed_result(registry):
    def broken():
        raise RuntimeError("CONNECTOR_GATEWAY_URL is not set")

    for dialect in (None, "original"):
        out = connop.manage_connections(CONNECT, session_key="s", gateway_factory=broken,
                                        registry=registry, dialect=dialect)
        assert out == connop.gateway_failed("CONNECTOR_GATEWAY_URL is not set", dialect=dialect)

    def stop():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        connop.manage_connections(CONNECT, session_key="s", gateway_factory=stop,
                                  registry=registry)


def test_gateway_and_gateway_factory_are_one_or_the_other(registry):
    with pytest.raises(TypeError, match="pass gateway or gateway_factory, not both"):
        connop.manage_connections(CONNECT, session_key="s", gateway=Gateway(),
                                  gateway_factory=Gateway, registry=registry)
    with pytest.raises(TypeError, match="gateway_factory must be a callable, not int"):
        connop.manage_connections(CONNECT, session_key="s", gateway_factory=5,
                                  registry=registry)
    with pytest.raises(TypeError, match="gateway must be a connop.HttpGateway"):
        connop.manage_connections(CONNECT, session_key="s", gateway_factory=lambda: None,
                                  registry=registry)


@pytest.mark.parametrize("argument", ["on_card", "on_update", "hosted_names"])
def test_a_callback_that_is_not_callable_is_a_type_error(registry, argument):
    gw = Gateway()
    kwargs = {"on_card": lambda card: None, argument: 5}
    started = time.monotonic()
    with pytest.raises(TypeError, match=f"{argument} must be a callable or None, not int"):
        connop.manage_connections(CONNECT, session_key="s", gateway=gw, surface="desktop",
                                  deadline=3.0, registry=registry, **kwargs)
    assert time.monotonic() - started < 1.0
    assert gw.mints == []
    with pytest.raises(TypeError, match="on_update must be a callable or None"):
        registry.open("h", ["gmail"], on_update=5)


@pytest.mark.parametrize("tick", [-1.0, float("nan"), float("inf")])
def test_a_tick_that_is_not_a_duration_is_a_value_error(registry, tick):
    with pytest.raises(ValueError, match="tick must be a finite number of seconds >= 0"):
        run(CONNECT, Gateway(), tick=tick, registry=registry)


def test_a_tick_of_another_type_is_a_type_error(registry):
    with pytest.raises(TypeError, match="tick"):
        run(CONNECT, Gateway(), tick="1", registry=registry)


@pytest.mark.parametrize("calls", ["worker", "inline"])
def test_a_zero_tick_does_not_keep_a_core_busy(registry, calls):
    """A tick of 0 read again as soon as each read answered: a core spun for the whole wait."""
    gw = Gateway()  # every account stays pending
    cpu, wall = time.process_time(), time.monotonic()
    out = run(CONNECT, gw, tick=0.0, deadline=1.0, registry=registry, calls=calls)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert out["settled_by"] == "deadline"
    assert cpu < 0.4 * wall, f"{cpu:.2f} s of CPU in {wall:.2f} s"
    per_row = len(gw.reads) / 2
    assert 20 <= per_row <= 1.0 / 0.01 + 5, f"{per_row} reads per row in 1 s"


# ----- on_card raising ---------------------------------------------------------------------

def test_an_exception_in_on_card_settles_at_once_and_is_raised(registry):
    """The card could not be shown, so nobody would answer it: the call waited for the whole
    deadline, with the exception printed as ignored."""
    seen = []
    old_hook = __import__("sys").unraisablehook
    __import__("sys").unraisablehook = lambda u: seen.append(u)

    def on_card(card):
        raise RuntimeError("card renderer broke")

    try:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="card renderer broke") as raised:
            run(CONNECT, Gateway(), on_card=on_card, tick=30.0, deadline=20.0,
                registry=registry)
        took = time.monotonic() - started
    finally:
        __import__("sys").unraisablehook = old_hook
    assert took < 2.0, f"waited {took:.1f} s"
    assert seen == [], "raised, not reported as ignored"
    assert any(frame.name == "on_card" for frame in
               __import__("traceback").extract_tb(raised.value.__traceback__))
    assert registry.current("s1") is None, "settled, nothing left open"


def test_an_exception_in_on_update_is_reported_and_changes_nothing(registry):
    seen = []
    sys = __import__("sys")
    old_hook, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(u.exc_value)

    def on_update(frame):
        raise RuntimeError("frame renderer broke")

    try:
        gw = Gateway(scripts={"gmail": ["active"], "notion": ["active"]})
        out = run(CONNECT, gw, on_update=on_update, tick=0.01, deadline=10.0, registry=registry)
    finally:
        sys.unraisablehook = old_hook
    assert out["settled_by"] == "all_resolved"
    assert seen and all(str(e) == "frame renderer broke" for e in seen)


def test_updates_for_names_the_operations_whose_frames_go_to_on_update(registry):
    frames = []
    # None asked for: no frame is built or delivered.
    gw = Gateway(scripts={"gmail": ["active"], "notion": ["active"]})
    out = run(CONNECT, gw, on_update=frames.append, updates_for=set(), tick=0.01,
              deadline=10.0, registry=registry)
    assert out["settled_by"] == "all_resolved" and frames == []

    # An id added while the call runs gets the frames from then on: the card callback adds
    # its operation's id, and every later frame is that operation's.
    wanted = set()
    gw = Gateway(scripts={"gmail": ["pending", "active"], "notion": ["active"]})
    out = run(CONNECT, gw, session_key="s2", on_card=lambda card: wanted.add(card["op_id"]),
              on_update=frames.append, updates_for=wanted, tick=0.01, deadline=10.0,
              registry=registry)
    assert out["settled_by"] == "all_resolved"
    assert frames, "the frames after the card came"
    assert {frame["op_id"] for frame in frames} == wanted
    assert frames[-1]["settled_by"] == "all_resolved"


# ----- the registry keeps settled operations -----------------------------------------------

def test_get_returns_a_settled_operation_until_its_session_settles_another(registry):
    gw = Gateway(scripts={"gmail": ["active"], "notion": ["active"]})
    cards = []
    text = connop.manage_connections(CONNECT, session_key="kept", gateway=gw, surface="desktop",
                                     on_card=cards.append, tick=0.01, deadline=10.0)
    op_id = cards[0]["op_id"]
    op = connop.get("kept", op_id)
    assert op is not None, "settled: gone from get"
    assert op.settled and op.view()["settled_by"] == "all_resolved"
    assert op.tool_result() == text
    assert [t["connect_url"] for t in op.view()["targets"]] == [
        "https://connect.test/gmail/1", "https://connect.test/notion/1"], "links stay"
    assert connop.current("kept") is None
    assert connop.Registry.default().get("kept", op_id) == op

    # The session's next operation settles: the first is forgotten.
    cards.clear()
    connop.manage_connections(CONNECT, session_key="kept", gateway=gw, surface="desktop",
                              on_card=cards.append, tick=0.01, deadline=10.0)
    assert connop.get("kept", op_id) is None
    assert connop.get("kept", cards[0]["op_id"]).settled

    # A registry of one's own keeps them too, and a host-settled one.
    own = registry.open("h", ["gmail"])
    own.settle(connop.SettleReason.continue_)
    assert registry.get("h", own.op_id).view()["settled_by"] == "continue"
    assert len(registry) == 0, "nothing open"


def test_a_settled_operation_is_forgotten_once_64_of_other_sessions_settled(registry):
    first = registry.open("first", ["gmail"])
    first.settle(connop.SettleReason.interrupt)
    for n in range(63):
        registry.open(f"other-{n}", ["gmail"]).settle(connop.SettleReason.interrupt)
    assert registry.get("first", first.op_id) == first
    last = registry.open("other-63", ["gmail"])
    last.settle(connop.SettleReason.interrupt)
    assert registry.get("first", first.op_id) is None
    assert registry.get("other-63", last.op_id) == last


# ----- respond -----------------------------------------------------------------------------

def test_respond_naming_an_unknown_target_raises_and_moves_nothing(registry):
    op = registry.open("s", ["gmail", "notion"])
    with pytest.raises(connop.InvalidAnswer) as refused:
        op.respond({"targets": [{"name": "notion", "status": "skipped"},
                                {"name": "gmial", "status": "skipped"}]})
    assert str(refused.value) == ("the answer names 'gmial', which is not a target of this "
                                  "operation (its targets: gmail, notion)")
    assert [t["state"] for t in op.view()["targets"]] == ["pending", "pending"]
    assert op.respond({"targets": [{"name": "notion", "status": "skipped"}]}) == \
        {"status": "ok", "settled": False}


def test_invalid_answer_lists_the_allowed_statuses(registry):
    op = registry.open("s", ["gmail"])
    assert connop.InvalidAnswer.allowed == ("skipped", "approved")
    with pytest.raises(connop.InvalidAnswer) as refused:
        op.respond({"targets": [{"name": "gmail", "status": "connected"}]})
    assert str(refused.value) == ("Connection answer is invalid: status 'connected'; a card "
                                  "answer's status is 'skipped' or 'approved'")
    with pytest.raises(connop.InvalidAnswer, match=r"a card answer is a dict \{'targets'"):
        op.respond(["gmail"])
    with pytest.raises(connop.InvalidAnswer, match=r"answer\['targets'\] must be a list"):
        op.respond({"targets": "gmail"})
    with pytest.raises(connop.InvalidAnswer, match=r"answer\['settled_by'\] must be 'continue'"):
        op.respond({"settled_by": "deadline"})
    assert not op.settled


# ----- the documentation stands alone --------------------------------------------------------

def docstrings():
    for name, obj in vars(connop).items():
        if name.startswith("__"):
            continue
        yield name, getattr(obj, "__doc__", None) or ""
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                yield f"{name}.{attr}", getattr(member, "__doc__", None) or ""


def test_the_docs_cite_nothing_outside_the_repository():
    for name, doc in docstrings():
        assert "SPEC" not in doc and "§" not in doc, f"{name}: {doc}"
    with open(PYI, encoding="utf-8") as stub:
        text = stub.read()
    assert "SPEC" not in text and "§" not in text
    assert "docs/python.md" in connop.__doc__ and "docs/python.md" in text


def test_an_operation_handle_counts_its_changes(registry):
    op = registry.open("seq", ["gmail", "notion"])
    before = op.seq
    assert before == op.result()["seq"]
    op.transition("gmail", "skipped", "user")
    assert op.seq == before + 1 == op.result()["seq"]
