"""Shared pieces of the module's own tests: a scripted gateway object in the original
client's shapes, and a runner with the card path's defaults."""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Dict, List, Optional

import pytest

import connop

# scripts/python-wheel-check sets this to the fresh environment the wheel went into: every
# test must run against that installed module, never a build in the source tree.
_INSTALLED_IN = os.environ.get("CONNOP_EXPECT_INSTALLED_IN")
if _INSTALLED_IN and not os.path.realpath(connop.__file__).startswith(
        os.path.realpath(_INSTALLED_IN) + os.sep):
    raise ImportError(f"connop was imported from {connop.__file__}, not from {_INSTALLED_IN}")


class Gateway:
    """A gateway object: every mint answers ``initiated`` with a link and an account id; each
    account answers the next status of its script (the last repeats), or ``pending``. A script
    entry may be ``None`` (unknown account) or an exception to raise."""

    def __init__(self, scripts: Optional[Dict[str, List[Any]]] = None, connected=()):
        self.scripts = dict(scripts or {})
        self.connected = set(connected)
        self.lock = threading.Lock()
        self.mints: List[dict] = []
        self.reads: List[tuple] = []
        self.lists = 0

    def list_connectors(self, *, timeout=None):
        with self.lock:
            self.lists += 1
        return [{"connector": s, "enabled": True, "connected": s in self.connected}
                for s in ("gmail", "notion", "slack")]

    def connections(self, connectors, *, reinitiate=False, return_to=None, op=None):
        with self.lock:
            self.mints.append({"connectors": tuple(connectors), "reinitiate": reinitiate,
                               "return_to": return_to, "op": op})
            n = len(self.mints)
        return {"results": [{"connector": s, "status": "initiated",
                             "connect_url": f"https://connect.test/{s}/{n}",
                             "connection_id": f"ca_{s}_{n}"} for s in connectors],
                "summary": {"total": len(connectors)}}

    def account_status(self, connection_id, *, timeout=None):
        with self.lock:
            self.reads.append((connection_id, timeout))
            nth = sum(1 for cid, _ in self.reads if cid == connection_id)
        slug = connection_id.split("_")[1]
        script = self.scripts.get(slug) or ["pending"]
        status = script[min(nth, len(script)) - 1]
        if isinstance(status, BaseException):
            raise status
        if status is None:
            return None
        return {"connectionId": connection_id, "connector": slug, "status": status,
                "label": slug, "active": status == "active"}


def run(args, gateway, *, session_key="s1", on_card: Optional[Callable] = None, card=True,
        surface="desktop", **kwargs) -> dict:
    """One tool call on this thread; the card path unless ``card`` is false."""
    if card and on_card is None:
        on_card = lambda payload: None  # noqa: E731
    registry = kwargs.pop("registry", None)
    if registry is None:
        registry = connop.Registry()
    text = connop.manage_connections(args, session_key=session_key, gateway=gateway,
                                     surface=surface, on_card=on_card if card else None,
                                     registry=registry, **kwargs)
    assert isinstance(text, str)
    return json.loads(text)


@pytest.fixture
def registry() -> connop.Registry:
    return connop.Registry()
