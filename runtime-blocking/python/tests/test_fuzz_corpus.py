"""The fuzz target's kept corpus (``fuzz/corpus``, grown by ``scripts/python-fuzz``), replayed
without atheris: every input returns or raises an ``Exception``, and the process lives."""

from __future__ import annotations

import os
import subprocess
import sys

FUZZ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz")


def test_the_fuzz_corpus_replays_without_a_crash():
    corpus = os.path.join(FUZZ, "corpus")
    inputs = len(os.listdir(corpus))
    assert inputs > 0, "the kept corpus is empty"
    done = subprocess.run([sys.executable, "fuzz_values.py", "--replay", corpus], cwd=FUZZ,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-3000:]}"
    assert done.stdout.strip() == f"replayed {inputs} inputs"
