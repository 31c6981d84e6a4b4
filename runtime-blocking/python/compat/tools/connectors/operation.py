"""Connection operations opened by a host, and the operation deadline.

``OPERATION_DEADLINE_SECONDS`` is read each time a tool call starts, so a host (or a test)
may set or patch it.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Optional

import connop

OPERATION_DEADLINE_SECONDS: float = 300.0


class Target(NamedTuple):
    """One target: a name, its kind and the action asked for it."""

    name: str
    kind: str = "connector"
    action: str = "connect"


class ConnectionOperation:
    """An operation a host opens itself (``live.open``): it holds the session until it is
    moved, settled or interrupted through its handle. Before it is opened it has no id."""

    def __init__(self, targets: Iterable[Any], session_key: str, deadline: Optional[float] = None):
        self.targets = [t if isinstance(t, Target) else Target(*t) if isinstance(t, tuple) else Target(t)
                        for t in targets]
        self.session_key = session_key
        self.deadline = OPERATION_DEADLINE_SECONDS if deadline is None else deadline
        self.handle: Optional[connop.Operation] = None

    @property
    def op_id(self) -> Optional[str]:
        return None if self.handle is None else self.handle.op_id

    def _open(self, registry: connop.Registry) -> connop.Operation:
        self.handle = registry.open(self.session_key, [tuple(t) for t in self.targets],
                                    deadline=float(self.deadline))
        return self.handle

    def __getattr__(self, name: str) -> Any:
        # transition, refresh, settle, view, result, ...: the live handle's own.
        handle = self.__dict__.get("handle")
        if handle is None:
            raise AttributeError(f"{name!r}: the operation is not open")
        return getattr(handle, name)
