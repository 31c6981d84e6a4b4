"""The interpreter exits while connop's calls are out: operations waiting on daemon threads,
settling, sending frames, reading handles, gateway calls running on the call pool. The
process must end with its own exit status and no crash report, every time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

EXIT_CHILD = textwrap.dedent(
    """
    import sys, threading, time
    sys.path.insert(0, sys.argv[1])
    import connop
    from conftest import Gateway

    what = sys.argv[2]

    class Slow(Gateway):
        def __init__(self, seconds):
            super().__init__()
            self.seconds = seconds

        def account_status(self, connection_id, *, timeout=None):
            time.sleep(self.seconds)  # inside Python, on a call thread, when exit begins
            return super().account_status(connection_id, timeout=timeout)

    def call(i, gateway, **kwargs):
        kwargs.setdefault("on_card", lambda card: None)
        connop.manage_connections({"action": "connect", "connectors": ["gmail", "notion"]},
                                  session_key=f"e{i}", gateway=gateway, surface="desktop",
                                  tick=0.01, **kwargs)

    def start(target, *args, **kwargs):
        threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True).start()

    if what == "settling":
        # Deadlines spread over the moment of exit: calls return while it finalizes.
        for i in range(50):
            start(call, i, Gateway(), deadline=0.3 + i * 0.002)
    elif what == "frames":
        # Update frames call into Python while it finalizes.
        for i in range(20):
            start(call, i, Gateway(), deadline=0.3 + i * 0.01,
                  on_update=lambda frame: time.sleep(0.01))
    elif what == "handles":
        # Host threads read and move operations while it finalizes.
        registry = connop.Registry()

        def host(i):
            op = registry.open(f"h{i}", ["gmail", "notion"])
            while True:
                op.view()
                registry.current(f"h{i}")
                op.refresh("gmail", detail=str(time.monotonic()))
        for i in range(8):
            start(host, i)
        for i in range(8):
            start(call, i, Gateway(), deadline=60.0, registry=registry)
    elif what == "slow-calls":
        for i in range(20):
            start(call, i, Slow(0.05), deadline=60.0)
    elif what == "inline-calls":
        for i in range(20):
            start(call, i, Slow(0.05), deadline=60.0, calls="inline")
    elif what == "long-calls":
        # Longer than connop waits for Python code it called to return at exit.
        for i in range(4):
            start(call, i, Slow(1.5), deadline=60.0)
    time.sleep(0.3)
    print("EXITING", flush=True)
    """
)


@pytest.mark.parametrize("what", ["settling", "frames", "handles", "slow-calls", "inline-calls",
                                  "long-calls"])
def test_the_interpreter_exits_cleanly_with_calls_out(tmp_path, what):
    script = tmp_path / "child.py"
    script.write_text(EXIT_CHILD)
    for _ in range(3):
        child = subprocess.run([sys.executable, str(script), HERE, what],
                               capture_output=True, text=True, timeout=60)
        assert child.returncode == 0, f"exit status {child.returncode}: {child.stderr[-2000:]}"
        assert child.stdout.strip() == "EXITING"
        for crash in ("FATAL", "Fatal Python error", "panicked", "Segmentation"):
            assert crash not in child.stderr, child.stderr[-2000:]


HOOK_CHILD = textwrap.dedent(
    """
    import atexit, json, sys, threading
    sys.path.insert(0, sys.argv[1])
    import connop
    from conftest import Gateway

    token = connop.Interrupt()
    carded = threading.Semaphore(0)
    results = []

    def call(i):
        out = connop.manage_connections({"action": "connect", "connectors": ["gmail"]},
                                        session_key=f"k{i}", gateway=Gateway(), surface="desktop",
                                        on_card=lambda card: carded.release(), tick=30.0,
                                        deadline=120.0, interrupt=token)
        results.append(json.loads(out)["settled_by"])

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(4)]

    def stop_turns():
        # A host's own exit hook, registered after connop's import: it runs first.
        token.trigger()
        for thread in threads:
            thread.join(10)
        print("SETTLED " + json.dumps(sorted(results)), flush=True)

    atexit.register(stop_turns)
    for thread in threads:
        thread.start()
    for _ in threads:
        carded.acquire(timeout=10)
    """
)


def test_a_hosts_exit_hook_still_settles_its_operations(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(HOOK_CHILD)
    child = subprocess.run([sys.executable, str(script), HERE], capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == 'SETTLED ["interrupt", "interrupt", "interrupt", "interrupt"]'
