#!/usr/bin/env python3
"""A fuzz target for the values a Python host hands the module: arbitrary nested Python
values (dicts, lists, tuples, str, bytes, int, float, bool, None, sets, objects, containers
that contain themselves, chains thousands of levels deep) given as ``manage_connections``'
``args``, as a card answer to ``Operation.respond``, and as a gateway object's answer to each
of its three methods and to ``hosted_names``.

The property: every call returns or raises an ``Exception``; the process never crashes, and
nothing raises a ``BaseException`` that is not an ``Exception`` (a Rust panic would).

Run with atheris (``pip install atheris``), as long as you like::

    python fuzz_values.py corpus/ -max_total_time=3600 -timeout=20

Replay a corpus without atheris (the module's tests do; each file is one input)::

    python fuzz_values.py --replay corpus/
"""

from __future__ import annotations

import json
import os
import struct
import sys


# Under atheris, connop is imported by the first input, after libFuzzer loaded (see the end).
FUZZING = __name__ == "__main__" and sys.argv[1:2] != ["--replay"]
if not FUZZING:
    import connop  # noqa: E402

WORDS = ["status", "connect", "reconnect", "gmail", "notion", "slack", "skipped", "approved",
         "connected", "continue", "initiated", "active", "failed", "pending", "results",
         "connector", "connectors", "action", "force", "targets", "name", "status_reason",
         "connect_url", "connection_id", "connectionId", "items", "enabled", "settled_by", ""]

LEAF_TAGS = 8  # tags below this build no container


class Reader:
    """Reads an input's bytes front to back; past the end every read is zero."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def take(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out.ljust(n, b"\0")

    def left(self) -> bool:
        return self.pos < len(self.data)


def leaf(r: Reader, tag: int):
    if tag == 0:
        return None
    if tag == 1:
        return bool(r.byte() & 1)
    if tag == 2:
        return r.byte() - 128
    if tag == 3:  # an integer of up to 32 bytes: inside and outside JSON's range
        return int.from_bytes(r.take(1 + r.byte() % 32), "little", signed=True)
    if tag == 4:  # any double, nan and the infinities included
        return struct.unpack("<d", r.take(8))[0]
    if tag == 5:  # any code points, lone surrogates included
        return "".join(chr((r.byte() << 8 | r.byte()) % 0x110000) for _ in range(r.byte() % 8))
    if tag == 6:
        return WORDS[r.byte() % len(WORDS)]
    return r.take(r.byte() % 8)  # bytes


def value(r: Reader, ancestors: list, depth: int = 0):
    """One value; containers on the way down are in ``ancestors`` (a reference back to one
    makes a value that contains itself)."""
    tag = r.byte() % 16
    if tag < LEAF_TAGS or depth > 60 or not r.left():
        return leaf(r, tag % LEAF_TAGS)
    if tag == 8 and ancestors:
        return ancestors[r.byte() % len(ancestors)]
    if tag == 9:  # a chain up to 6,000 levels deep, built without recursion
        inner = leaf(r, r.byte() % LEAF_TAGS)
        kinds = r.byte()
        for level in range((r.byte() << 8 | r.byte()) % 6000):
            kind = (kinds >> (level % 8)) % 3
            inner = [inner] if kind == 0 else {"k": inner} if kind == 1 else (inner,)
        return inner
    if tag == 10:
        return {leaf(r, 6), leaf(r, 2)}
    if tag == 11:
        return object()
    if tag in (12, 13):
        out: list = []
        ancestors.append(out)
        for _ in range(r.byte() % 6):
            out.append(value(r, ancestors, depth + 1))
        ancestors.pop()
        return out if tag == 12 else tuple(out)
    out_d: dict = {}
    ancestors.append(out_d)
    for _ in range(r.byte() % 6):
        key = leaf(r, 6) if r.byte() % 8 else leaf(r, r.byte() % LEAF_TAGS)
        try:
            out_d[key] = value(r, ancestors, depth + 1)
        except TypeError:  # an unhashable key: skip it
            pass
    ancestors.pop()
    return out_d


class Answers:
    """A gateway object answering well, except the one method given the fuzzed value."""

    def __init__(self, method: str, answer, token: "connop.Interrupt"):
        self.method, self.answer, self.token = method, answer, token

    def list_connectors(self, *, timeout=None):
        if self.method == "list_connectors":
            return self.answer
        return [{"connector": "gmail", "enabled": True, "connected": False}]

    def connections(self, connectors, *, reinitiate=False, return_to=None, op=None):
        if self.method == "connections":
            return self.answer
        return {"results": [{"connector": c, "status": "initiated", "connect_url": "https://c/x",
                             "connection_id": f"ca_{c}"} for c in connectors]}

    def account_status(self, connection_id, *, timeout=None):
        self.token.trigger()  # the operation settles once this read is in
        return self.answer


def call(r: Reader, val) -> None:
    """Feeds ``val`` to the API place the input's first byte chose."""
    registry = connop.Registry()
    token = connop.Interrupt()
    where = r.byte() % 9
    common = dict(session_key="s", registry=registry, interrupt=token, deadline=5.0, tick=0.01,
                  calls="inline")
    if where == 0:
        connop.manage_connections(val, gateway=Answers("", None, token), **common)
    elif where == 1:
        args = {"action": WORDS[r.byte() % 3], "connectors": val, "force": value(r, [])}
        connop.manage_connections(args, gateway=Answers("", None, token), **common)
    elif where == 2:
        registry.open("s", ["gmail", "notion"]).respond(val)
    elif where == 3:
        registry.open("s", ["gmail", "notion"]).respond({"targets": val,
                                                         "settled_by": value(r, [])})
    elif where == 4:
        connop.manage_connections({"action": "status"}, gateway=Answers("list_connectors", val,
                                                                        token), **common)
    elif where == 5:
        connop.manage_connections({"action": "connect", "connectors": ["gmail"]},
                                  gateway=Answers("connections", val, token), surface="cli",
                                  **common)
    elif where == 6:
        connop.manage_connections({"action": "connect", "connectors": ["gmail"]},
                                  gateway=Answers("account_status", val, token),
                                  surface="desktop", on_card=lambda card: None, **common)
    elif where == 7:
        connop.manage_connections({"action": "connect", "connectors": ["gmail", "github"]},
                                  gateway=Answers("connections", {"results": [
                                      {"connector": "github", "status": "failed"}]}, token),
                                  surface="cli", local_catalog=["github"],
                                  hosted_names=lambda: val, **common)
    else:  # args as JSON text, when the value has one
        try:
            text = json.dumps(val, allow_nan=bool(r.byte() & 1))
        except (TypeError, ValueError, RecursionError):
            return
        connop.manage_connections(text, gateway=Answers("", None, token), **common)


def one_input(data: bytes) -> None:
    """The fuzz body: returns or raises an ``Exception``, or the process is broken."""
    global connop
    if "connop" not in globals():
        import connop
    r = Reader(data)
    try:
        val = value(r, [])
    except RecursionError:
        return
    try:
        call(r, val)
    except Exception:  # a refusal of the value: the property holds
        pass


def replay(folder: str) -> int:
    names = sorted(os.listdir(folder))
    for name in names:
        with open(os.path.join(folder, name), "rb") as f:
            one_input(f.read())
    return len(names)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--replay":
        print(f"replayed {replay(sys.argv[2])} inputs", flush=True)
    else:
        import atheris
        atheris.instrument_func(one_input)
        atheris.instrument_func(value)
        atheris.instrument_func(call)
        atheris.Setup(sys.argv, one_input)
        # A connop built with coverage counters (scripts/python-fuzz builds one) calls
        # libFuzzer's hooks as it loads. atheris loads its libFuzzer inside Fuzz(): loaded for
        # every library to see, it is there when the first input imports connop.
        sys.setdlopenflags(sys.getdlopenflags() | os.RTLD_GLOBAL)
        atheris.Fuzz()
