"""While an operation waits: the GIL is free, other threads answer or interrupt it, and
Ctrl-C in the waiting thread interrupts it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import connop
from conftest import Gateway, run

CONNECT = {"action": "connect", "connectors": ["gmail", "notion"]}


def test_the_gil_is_released_while_waiting_so_another_python_thread_answers_the_card(registry):
    """Another Python thread answers the card while the caller waits; a third keeps running
    Python code the whole time. Holding the GIL would starve both: the operation would end at
    its deadline instead."""
    ticks = []
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    def on_card(payload):
        def answer():
            time.sleep(0.2)
            op = registry.get("s1", payload["op_id"])
            op.respond({"targets": [{"name": "gmail", "status": "skipped"},
                                    {"name": "notion", "status": "skipped"}]})
        threading.Thread(target=answer).start()

    spinner = threading.Thread(target=busy)
    spinner.start()
    try:
        started = time.monotonic()
        out = run(CONNECT, Gateway(), on_card=on_card, tick=30.0, deadline=10.0, registry=registry)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        spinner.join()
    assert out["settled_by"] == "all_resolved", out
    assert [t["state"] for t in out["targets"]] == ["skipped", "skipped"]
    assert elapsed < 5.0
    assert len(ticks) > 20, "the other Python thread ran while the call waited"


@pytest.fixture
def long_switch_interval():
    """CPython hands the GIL to a thread that waited 5 ms for it even while the holder is in
    the middle of its code: a holder the OS preempts for that long (a busy machine) loses it
    in pure Python too. A 1 s interval takes that time-slicing out, so what is tested is only
    whether connop's own calls let the GIL go (a free GIL is taken at once)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    yield
    sys.setswitchinterval(before)


def test_the_thread_whose_answer_settles_runs_its_next_line_before_the_waiting_call_returns(
    registry, long_switch_interval
):
    """A card answer from another thread settles the operation and wakes the waiting call; the
    answering thread's next line still runs first, as it would were the operation Python code:
    the answer keeps the GIL (and, when another thread's pump runs its effects, the waiting call
    returns only after the answering thread has it back), so the woken caller waits for it.
    Which thread runs Python first is a race, so it is run many times; on a busy machine an
    answer that let the GIL go lost it in about one run of four."""
    for round in range(200):
        after = threading.Event()

        def on_card(payload):
            def answer():
                op = registry.get("s1", payload["op_id"])
                op.transition("gmail", connop.TargetState.skipped, connop.Actor.user)
                op.respond({"targets": [{"name": "notion", "status": "skipped"}]})
                after.set()
            threading.Thread(target=answer).start()

        out = run(CONNECT, Gateway(), on_card=on_card, tick=0.001, deadline=10.0, registry=registry)
        assert out["settled_by"] == "all_resolved", out
        assert after.is_set(), f"round {round}: the call returned before the answering thread went on"


def test_an_interrupt_token_triggered_from_another_thread_settles_at_once(registry):
    token = connop.Interrupt()
    fired = {}

    def on_card(payload):
        def stop():
            fired["at"] = time.monotonic()
            token.trigger()
        threading.Timer(0.05, stop).start()

    out = run(CONNECT, Gateway(), on_card=on_card, tick=30.0, deadline=60.0,
              interrupt=token, registry=registry)
    returned = time.monotonic()
    assert out["settled_by"] == "interrupt"
    assert {t["state"] for t in out["targets"]} == {"not_connected"}
    assert returned - fired["at"] < 1.0
    assert token.triggered
    # Triggered until reset: a later call is interrupted before it waits.
    again = run(CONNECT, Gateway(), tick=30.0, deadline=60.0, interrupt=token,
                session_key="s2", registry=registry)
    assert again["settled_by"] == "interrupt"
    token.reset()
    assert not token.triggered


def test_the_operation_handle_interrupts_from_another_thread(registry):
    results = {}

    def worker():
        results["out"] = run(CONNECT, Gateway(), tick=30.0, deadline=60.0, registry=registry,
                             on_card=lambda p: results.setdefault("card", threading.Event()).set())

    results["card"] = threading.Event()
    thread = threading.Thread(target=worker)
    thread.start()
    assert results["card"].wait(10)
    op = registry.current("s1")
    assert op is not None and not op.settled
    assert op.interrupt() is True
    assert op.interrupt() is False, "settled once"
    thread.join(10)
    assert not thread.is_alive()
    assert results["out"]["settled_by"] == "interrupt"
    assert registry.current("s1") is None


CTRL_C_CHILD = textwrap.dedent(
    """
    import json, signal, sys, threading, time
    # Python turns Ctrl-C into KeyboardInterrupt only when it starts with SIGINT at its default,
    # which a job started in the background without job control (a CI step) does not: the
    # child takes the handler a terminal's Python would have.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[1])
    if sys.argv[2] == "imported-on-a-thread":
        # The module is first imported on another thread; Ctrl-C still reaches the main one.
        importer = threading.Thread(target=lambda: __import__("connop"))
        importer.start()
        importer.join()
    import connop
    from conftest import Gateway

    class SlowReads(Gateway):
        def account_status(self, connection_id, *, timeout=None):
            time.sleep(2.0)  # Ctrl-C lands in the gateway object's own Python code
            return super().account_status(connection_id, timeout=timeout)

    def on_card(payload):
        print("CARD", flush=True)

    started = time.monotonic()
    out = connop.manage_connections(
        {"action": "connect", "connectors": ["gmail"]}, session_key="s1",
        gateway=SlowReads() if sys.argv[2].startswith("slow") else Gateway(),
        calls="inline" if sys.argv[2] == "slow-inline" else None,
        surface="desktop", on_card=on_card, tick=30.0, deadline=120.0)
    print("RESULT " + json.dumps({"out": json.loads(out), "waited": time.monotonic() - started}),
          flush=True)
    """
)


@pytest.mark.parametrize("reads", ["parked", "slow", "slow-inline", "imported-on-a-thread"])
def test_ctrl_c_in_the_waiting_thread_interrupts_the_operation(tmp_path, reads):
    """Parked: the signal comes while the thread sleeps in Rust. Slow: while a read is out
    on a call thread. Slow, inline: while the waiting thread runs the gateway object's Python
    code, where it raises KeyboardInterrupt. Imported on a thread: the module was first
    imported off the main thread."""
    script = tmp_path / "child.py"
    script.write_text(CTRL_C_CHILD)
    child = subprocess.Popen([sys.executable, str(script), os.path.dirname(__file__), reads],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == "CARD", line + child.stderr.read()
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, stderr
    result = json.loads(stdout.split("RESULT ", 1)[1])
    assert result["out"]["settled_by"] == "interrupt"
    assert result["out"]["targets"][0]["state"] == "not_connected"
    assert took < 5.0
