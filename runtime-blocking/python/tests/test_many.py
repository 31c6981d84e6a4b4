"""1,000 operations at once, each on its own Python thread."""

from __future__ import annotations

import threading
import time

import connop
from conftest import Gateway

N = 1000


def test_a_thousand_concurrent_operations_on_a_thousand_threads(registry):
    gw = Gateway()
    carded = threading.Semaphore(0)
    results = [None] * N
    old = threading.stack_size(256 * 1024)

    def worker(i):
        results[i] = connop.manage_connections(
            {"action": "connect", "connectors": ["gmail"]}, session_key=f"s{i}", gateway=gw,
            surface="desktop", on_card=lambda payload: carded.release(), tick=30.0,
            deadline=120.0, registry=registry)

    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(N)]
        for thread in threads:
            thread.start()
    finally:
        threading.stack_size(old)
    deadline = time.monotonic() + 120
    for _ in range(N):
        assert carded.acquire(timeout=max(0.0, deadline - time.monotonic())), "every card shown"
    assert len(registry) == N
    # Half are answered by the card, half by Continue, all from this one thread.
    for i in range(N):
        op = registry.current(f"s{i}")
        assert op is not None
        if i % 2:
            assert op.respond({"targets": [{"name": "gmail", "status": "skipped"}]})["settled"]
        else:
            assert op.continue_()
    for thread in threads:
        thread.join(timeout=max(1.0, deadline - time.monotonic()))
        assert not thread.is_alive()
    import json
    outs = [json.loads(r) for r in results]
    assert [o["settled_by"] for o in outs[:2]] == ["continue", "all_resolved"]
    assert sum(o["settled_by"] == "all_resolved" for o in outs) == N // 2
    assert sum(o["settled_by"] == "continue" for o in outs) == N // 2
    assert len(registry) == 0
    assert len(gw.mints) == N
