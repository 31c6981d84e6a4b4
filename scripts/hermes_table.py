"""The table of the original system's vendored test files run against connop's layer.

Run by ``scripts/hermes-tests --table`` in its virtual environment. Each file runs in its own
pytest process (the files share basenames and module state); this same module, loaded into
that process as a pytest plugin (``-p hermes_table``), records each test's outcome. The
table then prints, per file, what passed and failed, and for every failing test its class
from ``runtime-blocking/python/upstream/classes.tsv``:

- ``behaviour``: connop's contract differs from the original's: a defect to fix;
- ``missing name``: the layer lacks a name the file uses: a defect to fix;
- ``era``: that era's contract contradicts the seed's (the reason names the rule);
- ``internals``: a test of the original's own unrelated internals (its terminal-UI gateway,
  agent loop, toolset assembly).

A test that runs longer than TEST_LIMIT_SECONDS has its tool call interrupted and counts as
failed. It exits non-zero when a test classed ``behaviour`` or ``missing name`` fails, when a failing
test has no class, when a classed test passes (the class is stale), when an entry names no
test, or when connop passes fewer tests of a file than the original system itself does
(``original.tsv``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

CLASSES = ("behaviour", "missing name", "era", "internals")
# A class that marks a defect of connop's: its test must pass.
DEFECTS = ("behaviour", "missing name")

_OUT = "HERMES_TABLE_OUT"

# How long one test may run before its tool call is interrupted and the test counted failed.
# A test of another era may wait on connop for what its own system did at once (a card where
# it gave links) until the operation's 300 s deadline.
TEST_LIMIT_SECONDS = 30.0


# ----- the pytest plugin ---------------------------------------------------------------------

_outcomes: Dict[str, str] = {}
_collection_errors: List[str] = []
_stopped: set = set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    import threading

    from tools.interrupt import set_interrupt

    thread = threading.get_ident()

    def too_long(signum, frame):
        # The tool call on this thread settles `interrupt` at once and returns.
        _stopped.add(item.nodeid)
        set_interrupt(True, thread)

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.setitimer(signal.ITIMER_REAL, TEST_LIMIT_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if item.nodeid in _stopped:
            set_interrupt(False, thread)


def pytest_collectreport(report):
    if report.failed:
        lines = [line for line in str(report.longrepr or "").splitlines() if line.strip()]
        _collection_errors.append(lines[-1].strip() if lines else "collection failed")


def pytest_runtest_logreport(report):
    name = report.nodeid.split("::", 1)[1] if "::" in report.nodeid else report.nodeid
    before = _outcomes.get(name)
    if report.failed or report.nodeid in _stopped:
        _outcomes[name] = "failed"
    elif report.skipped and before is None:
        _outcomes[name] = "skipped"
    elif report.when == "call" and report.passed and before is None:
        _outcomes[name] = "passed"


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get(_OUT)
    if out:
        Path(out).write_text(json.dumps({"tests": _outcomes, "collection": _collection_errors}))


# ----- the table -----------------------------------------------------------------------------


@dataclass
class FileRun:
    path: str  # relative to the upstream folder (or the seed's)
    tests: Dict[str, str] = field(default_factory=dict)
    collection: List[str] = field(default_factory=list)

    def failing_ids(self) -> List[str]:
        if self.collection:
            return [self.path]
        return [f"{self.path}::{name}" for name, outcome in self.tests.items() if outcome == "failed"]

    @property
    def passed(self) -> int:
        return sum(1 for o in self.tests.values() if o == "passed")

    @property
    def failed(self) -> int:
        return sum(1 for o in self.tests.values() if o == "failed")


def read_tsv(path: Path, columns: int) -> List[Tuple[str, ...]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != columns:
            raise SystemExit(f"{path}:{number}: expected {columns} tab-separated columns, got {len(parts)}")
        rows.append(tuple(p.strip() for p in parts))
    return rows


def run_file(python: str, root: Path, base: Path, rel: str, scratch: Path) -> FileRun:
    out = scratch / (rel.replace("/", "__") + ".json")
    env = dict(os.environ)
    env[_OUT] = str(out)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "hermes_table", "-q",
               "--no-header", "-o", "console_output_style=classic", str(base / rel)]
    done = subprocess.run(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if not out.exists():
        sys.stderr.write(done.stdout)
        raise SystemExit(f"hermes-tests --table: pytest wrote no outcomes for {rel}")
    data = json.loads(out.read_text())
    return FileRun(rel, data["tests"], data["collection"])


def main(argv: List[str]) -> int:
    root = Path(argv[0]).resolve()
    module = root / "runtime-blocking" / "python"
    upstream = module / "upstream"
    scratch = Path(argv[1])
    classes: Dict[str, Tuple[str, str]] = {}
    for test_id, klass, reason in read_tsv(upstream / "classes.tsv", 3):
        if klass not in CLASSES:
            raise SystemExit(f"classes.tsv: {test_id}: unknown class {klass!r} (one of {', '.join(CLASSES)})")
        if test_id in classes:
            raise SystemExit(f"classes.tsv: {test_id} is listed twice")
        classes[test_id] = (klass, reason)
    original = {path: count for path, count in read_tsv(upstream / "original.tsv", 2)}

    runs = [("seed", module / "seed", "test_connectors_managed.py")]
    for path in sorted(upstream.rglob("test_*.py")):
        runs.append(("upstream", upstream, str(path.relative_to(upstream))))

    problems: List[str] = []
    seen_ids = set()
    rows = []
    details = []
    for where, base, rel in runs:
        result = run_file(sys.executable, root, base, rel, scratch)
        total = result.passed + result.failed if not result.collection else None
        theirs = original.get(rel) if where == "upstream" else None
        label = rel if where == "upstream" else f"seed/{rel}"
        rows.append((label, result, total, theirs))
        known = {f"{rel}::{name}" for name in result.tests} | {rel}
        seen_ids |= known
        for test_id in result.failing_ids():
            klass, reason = classes.get(test_id, (None, None))
            if where == "seed" or klass is None:
                why = result.collection[0] if result.collection else "no entry in classes.tsv"
                problems.append(f"{label if where == 'seed' else test_id}: fails and has no class ({why})")
                details.append((test_id, "UNCLASSED", why))
                continue
            details.append((test_id, klass, reason))
            if klass in DEFECTS:
                problems.append(f"{test_id}: fails, classed '{klass}': {reason}")
        for name, outcome in result.tests.items():
            test_id = f"{rel}::{name}"
            if outcome == "passed" and test_id in classes:
                problems.append(f"{test_id}: passes but is classed '{classes[test_id][0]}' (stale entry)")
        if theirs is not None:
            their_passed = int(theirs.split("/")[0])
            if result.passed < their_passed:
                problems.append(f"{rel}: connop passes {result.passed}, the original {theirs}")
    for test_id in classes:
        if test_id not in seen_ids:
            problems.append(f"classes.tsv names {test_id}, which is not a test of the vendored files")

    width = max(len(label) for label, *_ in rows)
    print(f"{'file':<{width}}  passed  failed  original")
    for label, result, total, theirs in rows:
        if result.collection:
            print(f"{label:<{width}}  {'-':>6}  {'collection error':>6}  {theirs or ''}")
        else:
            print(f"{label:<{width}}  {result.passed:>6}  {result.failed:>6}  {theirs or ''}")
    if details:
        print()
        print("failing tests:")
        for test_id, klass, reason in details:
            print(f"  {test_id}\n      {klass}: {reason}")
    if problems:
        print()
        print("hermes-tests --table: FAILED")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
