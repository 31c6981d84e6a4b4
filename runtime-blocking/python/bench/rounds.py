"""Rounds through the compatibility layer, for an instruction count, with the vendored
seed's fake gateway. ``card``: a worker thread runs ``manage_connections`` with a card;
another thread finds the operation (``live.get``) and answers it (``transition``).
``lifecycle``: two targets, both connected on their first read, tick 0 (the lifecycle of
``embedding.py``). No figure of its own: run it under callgrind for two sizes; the
difference over the difference of rounds is one round's instructions (docs/PERFORMANCE.md,
"From Python"):

    python rounds.py card|lifecycle ROUNDS
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "seed"))

from unittest.mock import patch  # noqa: E402

import test_connectors_managed as seed  # noqa: E402  (the original's GatewayFake)
from tools.connectors import contract as c  # noqa: E402
from tools.connectors import live, managed  # noqa: E402
from tools.connectors.tool import manage_connections  # noqa: E402

cards: "queue.Queue" = queue.Queue()


def answerer() -> None:
    while True:
        op_id = cards.get()
        if op_id is None:
            return
        op = live.get("s1", op_id)
        time.sleep(0.0005)  # the waiting thread is parked by now
        op.transition("gmail", c.TargetState.skipped, c.Actor.user)


def rounds(count: int) -> None:
    # Off the main thread: a waiting main thread wakes every 20 ms for signals, which would
    # count the machine's speed into the figure.
    for _ in range(count):
        gw = seed.GatewayFake()
        out = manage_connections({"action": "connect", "connectors": ["gmail"]},
                                 client_factory=lambda: gw,
                                 connection_callback=lambda p: cards.put(p["op_id"]),
                                 session_id="s1")
        assert '"all_resolved"' in out, out


def lifecycles(count: int) -> None:
    with patch.object(managed, "WATCH_TICK_SECONDS", 0.0):
        for _ in range(count):
            gw = seed.GatewayFake(flips={"gmail": 1, "notion": 1})
            out = manage_connections({"action": "connect", "connectors": ["gmail", "notion"]},
                                     client_factory=lambda: gw,
                                     connection_callback=lambda p: None, session_id="s1")
            assert '"all_resolved"' in out and len(gw.reads) == 2, out


if __name__ == "__main__":
    kind, count = sys.argv[1], int(sys.argv[2])
    if kind == "lifecycle":
        lifecycles(count)
        sys.exit()
    answering = threading.Thread(target=answerer)
    answering.start()
    with patch.object(managed, "WATCH_TICK_SECONDS", 30.0):
        worker = threading.Thread(target=rounds, args=(count,))
        worker.start()
        worker.join()
    cards.put(None)
    answering.join()
