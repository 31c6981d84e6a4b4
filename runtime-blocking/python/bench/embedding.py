"""Measures the connop module from Python, with the original test file's own fake gateway
(``GatewayFake`` of the vendored seed), through the compatibility layer as the original agent
would call it. Not a test: run it with ``scripts/python-bench``; it prints one JSON object.

- the floor: one Python thread waking another through ``threading.Event``, the same way.
- card answer -> ``manage_connections`` returns: another thread skips the parked operation's
  one target (the seed's own way of answering the card); the time from just before that call
  to the return, seen by the waiting thread.
- interrupt -> returns: the same with ``tools.interrupt.set_interrupt(True, tid)``.
- CPU per two-target lifecycle: connect gmail and notion, both active on their first read,
  tick 0; process CPU time per lifecycle, and the fake's own share (its three methods called
  as often, alone).
- 1,000 parked operations on 1,000 threads (the default 1 s tick, each reading its account
  once a second, each with a fake of its own, as each seed test has; one shared fake would
  scan every read ever made on each read): resident memory per operation, and process CPU per parked operation per
  second over a quiet window.
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "seed"))

from unittest.mock import patch  # noqa: E402

import connop  # noqa: E402
import test_connectors_managed as seed  # noqa: E402  (the original's GatewayFake)
from tools import interrupt as tool_interrupt  # noqa: E402
from tools.connectors import contract as c  # noqa: E402
from tools.connectors import live  # noqa: E402
from tools.connectors import managed  # noqa: E402
from tools.connectors.tool import manage_connections  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2000"))
LIFECYCLES = int(os.environ.get("BENCH_LIFECYCLES", "20000"))
PARKED = int(os.environ.get("BENCH_PARKED", "1000"))
WINDOW = float(os.environ.get("BENCH_WINDOW", "10"))


def percentiles(samples):
    ordered = sorted(samples)
    return {"median_us": round(statistics.median(ordered) * 1e6, 1),
            "p99_us": round(ordered[int(len(ordered) * 0.99) - 1] * 1e6, 1),
            "max_us": round(ordered[-1] * 1e6, 1), "n": len(ordered)}


def wake_latency(kind: str):
    """The waiting thread parks on a card; the answering thread acts after the card and
    blocks at once (so the GIL is free), as a card server thread would."""
    cards: "queue.Queue[tuple]" = queue.Queue()
    answered = threading.Event()
    stamps = []
    done = threading.Event()

    def answerer():
        while True:
            item = cards.get()
            if item is None:
                return
            op_id, tid = item
            op = live.get("s1", op_id)
            time.sleep(0.0005)  # the waiting thread is parked by now
            started = time.perf_counter()
            stamps.append(started)
            if kind == "card":
                op.transition("gmail", c.TargetState.skipped, c.Actor.user)
            else:
                tool_interrupt.set_interrupt(True, tid)
            answered.set()

    thread = threading.Thread(target=answerer)
    thread.start()
    samples = []
    try:
        with patch.object(managed, "WATCH_TICK_SECONDS", 30.0):
            for _ in range(ROUNDS):
                gw = seed.GatewayFake()
                tid = threading.get_ident()
                answered.clear()

                def cb(payload):
                    cards.put((payload["op_id"], tid))

                out = manage_connections({"action": "connect", "connectors": ["gmail"]},
                                         client_factory=lambda: gw, connection_callback=cb,
                                         session_id="s1")
                returned = time.perf_counter()
                samples.append(returned - stamps[-1])
                if kind == "interrupt":
                    tool_interrupt.set_interrupt(False, tid)
                    assert json.loads(out)["settled_by"] == "interrupt"
                else:
                    assert json.loads(out)["settled_by"] == "all_resolved"
    finally:
        cards.put(None)
        thread.join()
        done.set()
    return percentiles(samples)


def python_floor():
    """The same hand-off with no connop: the waiting thread blocks in ``Event.wait``, the
    answering thread stamps, ``set()``s and blocks again. No Python host does better."""
    go: "queue.Queue[object]" = queue.Queue()
    stamps = []

    def answerer():
        while True:
            event = go.get()
            if event is None:
                return
            time.sleep(0.0005)
            stamps.append(time.perf_counter())
            event.set()

    thread = threading.Thread(target=answerer)
    thread.start()
    samples = []
    for _ in range(ROUNDS):
        event = threading.Event()
        go.put(event)
        event.wait()
        samples.append(time.perf_counter() - stamps[-1])
    go.put(None)
    thread.join()
    return percentiles(samples)


def lifecycle_cpu():
    def one():
        gw = seed.GatewayFake(flips={"gmail": 1, "notion": 1})
        out = manage_connections({"action": "connect", "connectors": ["gmail", "notion"]},
                                 client_factory=lambda: gw, connection_callback=lambda p: None,
                                 session_id="s1")
        return gw, out

    with patch.object(managed, "WATCH_TICK_SECONDS", 0.0):
        for _ in range(200):
            one()
        started = time.process_time()
        for _ in range(LIFECYCLES):
            gw, out = one()
        total = time.process_time() - started
    assert json.loads(out)["settled_by"] == "all_resolved" and len(gw.reads) == 2
    # The fake's own share: the same calls on a fresh fake, without connop.
    started = time.process_time()
    for _ in range(LIFECYCLES):
        gw = seed.GatewayFake(flips={"gmail": 1, "notion": 1})
        gw.connections(["gmail", "notion"], reinitiate=False, return_to="hermes-desktop", op="0" * 12)
        gw.account_status("ca_gmail_1", timeout=10.0)
        gw.account_status("ca_notion_1", timeout=10.0)
    fake = time.process_time() - started
    return {"cpu_per_lifecycle_us": round(total / LIFECYCLES * 1e6, 1),
            "fake_share_us": round(fake / LIFECYCLES * 1e6, 1), "n": LIFECYCLES}


def rss_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def idle_threads():
    """The floor of the parked figure: as many Python threads, each blocked in
    ``Event.wait`` with nothing of connop's."""
    release = threading.Event()
    started = threading.Semaphore(0)
    before = rss_kib()

    def idle():
        started.release()
        release.wait()

    threads = [threading.Thread(target=idle, daemon=True) for _ in range(PARKED)]
    for thread in threads:
        thread.start()
    for _ in range(PARKED):
        started.acquire()
    time.sleep(1.0)
    rss = rss_kib()
    release.set()
    for thread in threads:
        thread.join()
    return {"threads": PARKED, "memory_per_thread_kib": round((rss - before) / PARKED, 1)}


def parked():
    registry = connop.Registry()
    shown = threading.Semaphore(0)
    results = []
    before = rss_kib()

    def worker(i):
        results.append(connop.manage_connections(
            {"action": "connect", "connectors": ["gmail"]}, session_key=f"p{i}",
            gateway=seed.GatewayFake(),
            surface="desktop", on_card=lambda p: shown.release(), tick=1.0, deadline=600.0,
            registry=registry))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(PARKED)]
    for thread in threads:
        thread.start()
    for _ in range(PARKED):
        shown.acquire()
    time.sleep(2.0)  # every operation past its first reads
    rss = rss_kib()
    started_cpu, started = time.process_time(), time.monotonic()
    time.sleep(WINDOW)
    cpu = time.process_time() - started_cpu
    wall = time.monotonic() - started
    token_ops = [registry.current(f"p{i}") for i in range(PARKED)]
    for op in token_ops:
        op.interrupt()
    for thread in threads:
        thread.join()
    assert len(results) == PARKED
    return {"operations": PARKED, "memory_per_op_kib": round((rss - before) / PARKED, 1),
            "cpu_per_parked_op_per_s_us": round(cpu / wall / PARKED * 1e6, 2),
            "window_s": round(wall, 1)}


def main():
    live.reset_for_tests()
    report = {
        "python": sys.version.split()[0],
        "connop": connop.__version__,
        "floor_event_wake": python_floor(),
        "card_answer_to_return": wake_latency("card"),
        "interrupt_to_return": wake_latency("interrupt"),
        "two_target_lifecycle": lifecycle_cpu(),
        # In a process of its own: freed thread stacks stay cached for the next threads, so
        # whichever of the two ran second would look cheaper.
        "idle_threads_floor": json.loads(subprocess.run(
            [sys.executable, os.path.abspath(__file__), "idle"], check=True,
            capture_output=True, text=True).stdout),
        "parked": parked(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    if sys.argv[1:] == ["idle"]:
        print(json.dumps(idle_threads()))
    else:
        main()
