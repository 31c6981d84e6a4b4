"""Values that cannot be JSON data: nested deeper than a JSON parser goes, or containing
themselves. Each must come back as a Python exception naming the value, never a crash. Every
case runs in a child interpreter, so a crash is reported as a failed test with its exit status
instead of ending the test run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import connop

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD_PRELUDE = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import connop
    from conftest import Gateway

    def nest(depth, leaf="x"):
        value = leaf
        for _ in range(depth):
            value = [value]
        return value

    def report(call):
        try:
            out = call()
        except BaseException as error:  # the test reads what was raised
            print("RAISED " + json.dumps([type(error).__name__, str(error)]), flush=True)
        else:
            print("RETURNED " + json.dumps(out if isinstance(out, (dict, list)) else str(out)),
                  flush=True)
    """
)


def child(body: str):
    """Runs ``body`` after the prelude in a fresh interpreter; returns what it reported."""
    done = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(body), HERE],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"the child crashed ({done.returncode}): {done.stderr[-2000:]}"
    line = [ln for ln in done.stdout.splitlines() if ln.startswith(("RAISED ", "RETURNED "))]
    assert len(line) == 1, done.stdout + done.stderr
    kind, payload = line[0].split(" ", 1)
    return kind, json.loads(payload)


CONNECT = 'dict(action="connect", connectors=["gmail"])'


@pytest.mark.parametrize("shape", ["list", "dict", "tuple"])
def test_args_nested_ten_thousand_deep_is_a_value_error(shape):
    wrap = {"list": "[value]", "dict": '{"k": value}', "tuple": "(value,)"}[shape]
    kind, (name, message) = child(f"""
        value = "x"
        for _ in range(10000):
            value = {wrap}
        args = {CONNECT}
        args["extra"] = value
        report(lambda: connop.manage_connections(args, session_key="s", gateway=Gateway()))
    """)
    assert (kind, name) == ("RAISED", "ValueError")
    assert message.startswith("args nests containers more than 127 deep"), message
    assert "args['extra']" in message


def test_args_that_contain_themselves_are_a_value_error():
    kind, (name, message) = child(f"""
        args = {CONNECT}
        args["again"] = [1, args]
        report(lambda: connop.manage_connections(args, session_key="s", gateway=Gateway()))
    """)
    assert (kind, name) == ("RAISED", "ValueError")
    assert message == "args contains itself: args['again'][1] is args", message


def test_a_card_answer_nested_deep_or_containing_itself_is_a_value_error():
    kind, (name, message) = child("""
        op = connop.Registry().open("s", ["gmail"])
        report(lambda: op.respond({"targets": nest(10000)}))
    """)
    assert (kind, name) == ("RAISED", "ValueError")
    assert message.startswith("answer nests containers more than 127 deep"), message

    kind, (name, message) = child("""
        op = connop.Registry().open("s", ["gmail"])
        answer = {"targets": [{"name": "gmail", "status": "skipped"}]}
        answer["targets"][0]["more"] = answer["targets"]
        report(lambda: op.respond(answer))
    """)
    assert (kind, name) == ("RAISED", "ValueError")
    assert message == "answer contains itself: answer['targets'][0]['more'] is answer['targets']"


@pytest.mark.parametrize("answer", ["deep", "cycle"])
@pytest.mark.parametrize("calls", ["worker", "inline"])
def test_a_gateway_answer_nested_deep_or_containing_itself_is_a_failed_call(answer, calls):
    kind, out = child(f"""
        class Hostile(Gateway):
            def connections(self, connectors, **kwargs):
                if {answer!r} == "deep":
                    return {{"results": nest(1800)}}
                looped = {{"results": []}}
                looped["results"].append(looped)
                return looped
        report(lambda: json.loads(connop.manage_connections(
            {CONNECT}, session_key="s", gateway=Hostile(), surface="desktop",
            on_card=lambda card: None, deadline=5.0, calls={calls!r})))
    """)
    assert kind == "RETURNED", out
    assert out["error"].startswith("The connector gateway request failed: "), out
    expected = ("answer nests containers more than 127 deep" if answer == "deep"
                else "answer contains itself: answer['results'][0] is answer")
    assert expected in out["error"], out


def nest(depth):
    value = "x"
    for _ in range(depth):
        value = [value]
    return value


def test_the_nesting_limit_is_the_json_parsers(registry):
    """A value is taken as a Python object exactly when its JSON text is taken."""
    from conftest import Gateway
    for depth in (120, 125, 126, 127, 128, 200):
        args = {"action": "status", "extra": nest(depth)}
        outcomes = []
        for form in (args, json.dumps(args)):
            try:
                connop.manage_connections(form, session_key="s", gateway=Gateway(),
                                          registry=registry)
                outcomes.append("ok")
            except ValueError:
                outcomes.append("refused")
        assert outcomes[0] == outcomes[1], (depth, outcomes)
        # The outer dict is one level: nest(126) inside it is 127 containers deep.
        assert outcomes[0] == ("ok" if depth <= 126 else "refused"), (depth, outcomes)


def test_the_same_object_twice_is_not_a_cycle(registry):
    from conftest import Gateway
    shared = {"a": [1, 2]}
    out = connop.manage_connections({"action": "status", "x": [shared, shared, (shared,)]},
                                    session_key="s", gateway=Gateway(), registry=registry)
    assert "connectors" in json.loads(out)


@pytest.mark.parametrize("value, error, text", [
    ({1, 2}, TypeError, "args['extra']: a set is not JSON data"),
    (b"bytes", TypeError, "args['extra']: a bytes is not JSON data"),
    ({1: "x"}, TypeError, "args['extra']: a dict key that is not a str (int)"),
    ([10 ** 30], ValueError, "args['extra'][0]: an integer outside JSON's range"),
    (float("nan"), ValueError, "args['extra']: nan is not a JSON number"),
])
def test_values_json_cannot_carry_name_where_they_are(registry, value, error, text):
    from conftest import Gateway
    with pytest.raises(error) as raised:
        connop.manage_connections({"action": "status", "extra": value}, session_key="s",
                                  gateway=Gateway(), registry=registry)
    assert str(raised.value).startswith(text), str(raised.value)
