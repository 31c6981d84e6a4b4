"""The registry of open operations, one per session (SPEC §4), as the original's ``live``
module offers it. Tool calls register here; ``reset_for_tests`` starts an empty one."""

from __future__ import annotations

from typing import Iterable, Optional, Union

import connop

from . import operation as _operation

_registry = connop.Registry()


def registry() -> connop.Registry:
    """The registry tool calls use now."""
    return _registry


def reset_for_tests() -> None:
    """Forgets every operation: a fresh, empty registry."""
    global _registry
    _registry = connop.Registry()


def current(session_key: str) -> Optional[connop.Operation]:
    """The session's unsettled operation, or ``None``."""
    return _registry.current(session_key)


def get(session_key: str, op_id: str) -> Optional[connop.Operation]:
    """The session's operation with that id, settled or not, or ``None``."""
    return _registry.get(session_key, op_id)


def open(op: Union[_operation.ConnectionOperation, connop.Operation]) -> connop.Operation:  # noqa: A001
    """Registers a host-made operation; raises ``connop.OperationAlreadyOpen`` when the session
    has one open."""
    if isinstance(op, connop.Operation):
        return op
    return op._open(_registry)


def open_new(targets: Iterable, session_key: str, deadline: Optional[float] = None) -> connop.Operation:
    """Makes and registers an operation in one step."""
    return open(_operation.ConnectionOperation(targets, session_key=session_key, deadline=deadline))
