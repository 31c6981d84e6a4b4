"""The registry of open operations, one per profile and session, as the original's ``live``
module offers it: ``open``, ``get``, ``current``, ``close``, ``OperationAlreadyOpen``,
``reset_for_tests``. Which operation a session holds is connop's registry's answer; this
module hands back the host's own ``ConnectionOperation`` object for it (the same object that
was opened).

Profiles: ``open`` registers under the profile home of the current context
(``hermes_constants``); lookups name a ``profile_home``, else the process's home."""

from __future__ import annotations

import functools
import os
import weakref
from typing import Iterable, Optional

import connop
import hermes_constants

from . import operation as _operation

_registry = connop.Registry()
_objects: "weakref.WeakValueDictionary[str, _operation.ConnectionOperation]" = \
    weakref.WeakValueDictionary()


class OperationAlreadyOpen(connop.OperationAlreadyOpen):
    """The session already has an unsettled operation: ``existing`` (its text names it)."""

    def __init__(self, message: str, existing: Optional["_operation.ConnectionOperation"] = None):
        super().__init__(message)
        self.existing = existing


def _profile(home) -> str:
    return os.path.realpath(os.fspath(home))


@functools.lru_cache(maxsize=256)
def _for_home(home: str) -> connop.Registry:
    """The registry of the profile at ``home``, looked up once per spelling (every tool call
    asks): ``~/.hermes`` and its real path are one profile."""
    return _registry.for_profile(_profile(home))


def registry(profile_home: Optional[str] = None) -> connop.Registry:
    """The registry as a profile sees it: ``profile_home``'s, else the current context's
    (what a tool call registers under)."""
    home = profile_home if profile_home is not None else hermes_constants.hermes_home_text()
    return _for_home(os.fspath(home))


def _lookup(profile_home: Optional[str]) -> connop.Registry:
    home = (profile_home if profile_home is not None
            else hermes_constants.hermes_home_text(process=True))
    return _for_home(os.fspath(home))


def reset_for_tests() -> None:
    """Forgets every entry: an empty registry."""
    _registry.clear()


def _remember(operation: "_operation.ConnectionOperation") -> None:
    _objects[operation.op_id] = operation


# The held objects something waits on (their ``wake`` was asked for), by operation id.
_waiting: "weakref.WeakValueDictionary[str, _operation.ConnectionOperation]" = \
    weakref.WeakValueDictionary()


def frames_wanted() -> "dict":
    """The operation ids whose tool-call frames must be built, as a mapping connop asks frame
    by frame (in C, no Python code runs): every held object's while a host replaced the
    change hook, else those something waits on."""
    if _operation.ConnectionOperation.on_change is not _operation.NO_HOOK:
        return _objects.data
    return _waiting.data


def _object(handle: Optional[connop.Operation]) -> Optional["_operation.ConnectionOperation"]:
    if handle is None:
        return None
    found = _objects.get(handle.op_id)
    if found is None:
        found = _operation.ConnectionOperation._adopt(handle)
        _remember(found)
    return found


def current(session_key: str, profile_home: Optional[str] = None) -> Optional["_operation.ConnectionOperation"]:
    """The session's unsettled operation, or ``None``."""
    return _object(_lookup(profile_home).current(session_key))


def get(session_key: str, op_id: str, profile_home: Optional[str] = None) -> Optional["_operation.ConnectionOperation"]:
    """The session's operation with that id, settled or not, or ``None``."""
    return _object(_lookup(profile_home).get(session_key, op_id))


def open(operation: "_operation.ConnectionOperation") -> "_operation.ConnectionOperation":  # noqa: A001
    """Registers the operation under its session key and the current context's profile;
    raises ``OperationAlreadyOpen`` while that session has an unsettled one (a settled
    leftover is replaced)."""
    handle = operation if isinstance(operation, connop.Operation) else operation._handle
    try:
        handle.register(profile=_profile(hermes_constants.get_hermes_home()))
    except connop.OperationAlreadyOpen as refused:
        message, open_id = refused.args[0], refused.args[1] if len(refused.args) > 1 else None
        existing = _objects.get(open_id) if open_id else None
        raise OperationAlreadyOpen(message, existing) from None
    return operation


def close(operation: "_operation.ConnectionOperation") -> None:
    """Removes the session's entry if it is this operation; idempotent."""
    (operation if isinstance(operation, connop.Operation) else operation._handle).close()


def open_new(targets: Iterable, session_key: str, deadline: Optional[float] = None) -> "_operation.ConnectionOperation":
    """Makes and registers an operation in one step."""
    return open(_operation.ConnectionOperation(targets, session_key=session_key, deadline=deadline))
