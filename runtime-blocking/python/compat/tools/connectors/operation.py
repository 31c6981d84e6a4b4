"""Connection operations as the original's ``operation`` module offers them: a
``ConnectionOperation`` exists as soon as it is made (no registry needed), is moved,
refreshed and settled by its host, wakes its waiter on every change, and registers when
``live.open`` asks. Every rule is connop's core's: the object holds a ``connop.Operation``
made by ``connop.Registry.detached`` and only reshapes what it answers.

``OPERATION_DEADLINE_SECONDS`` is read each time an operation is made or a tool call starts,
so a host (or a test) may set or patch it.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Dict, Iterable, List, Optional

import connop

from . import contract as _c

OPERATION_DEADLINE_SECONDS: float = 300.0

IllegalTransition = connop.IllegalTransition

# The change record's keys in an update frame; the rest of the frame is the snapshot.
_CHANGE_KEYS = ("target", "from", "to", "actor", "detail")


class Target:
    """One target: what is asked (``name``, ``kind``, ``action``, the card's
    ``instructions``). Made by a host, it describes a target to put in an operation; read
    from an operation (``ConnectionOperation.target``), it shows the row as it stands now,
    and ``required_env`` may be set on it."""

    def __init__(self, name: str, kind: str = "connector", action: str = "connect", *,
                 instructions: str = "", required_env: Optional[List[Dict[str, Any]]] = None):
        self._spec = {"name": name, "kind": _wire(kind), "action": _wire(action),
                      "instructions": instructions or None}
        self._required_env = required_env
        self._op: Optional[connop.Operation] = None

    @classmethod
    def _bound(cls, op: connop.Operation, name: str) -> "Target":
        target = cls.__new__(cls)
        target._spec = {"name": name}
        target._required_env = None
        target._op = op
        return target

    def _row(self) -> Dict[str, Any]:
        if self._op is None:
            # What is asked; where it stands is the operation's to say.
            return _Unplaced(self._spec)
        row = self._op.target(self._spec["name"])
        if row is None:
            raise AttributeError(f"no target {self._spec['name']!r} in the operation")
        return row

    name = property(lambda self: self._row()["name"])
    kind = property(lambda self: self._row()["kind"])
    action = property(lambda self: self._row()["action"])
    state = property(lambda self: _c.TargetState(self._row()["state"]))
    detail = property(lambda self: self._row()["detail"])
    instructions = property(lambda self: self._row()["instructions"] or "")
    connect_url = property(lambda self: self._row()["connect_url"])
    connection_id = property(lambda self: self._row()["connection_id"])
    next_read_at = property(lambda self: self._row()["next_read_at"])
    extra = property(lambda self: self._row()["extra"] or {})

    @property
    def required_env(self) -> List[Dict[str, Any]]:
        return self._row()["required_env"] or []

    @required_env.setter
    def required_env(self, value: Optional[List[Dict[str, Any]]]) -> None:
        if self._op is None:
            raise AttributeError("required_env is set on an operation's target")
        self._op.set_required_env(self._spec["name"], value)

    def snapshot(self) -> Dict[str, Any]:
        """The row as payloads show it."""
        return self._row()["snapshot"]

    def __repr__(self) -> str:
        return f"Target({self._spec['name']!r})"


class _Unplaced(dict):
    """A target not in an operation: it has what was asked, and no state yet."""

    def __missing__(self, key: str) -> Any:
        raise AttributeError(f"{key!r}: the target is not in an operation yet")


def _wire(member: Any) -> str:
    return getattr(member, "value", member)


def _spec(target: Any) -> Dict[str, Any]:
    if isinstance(target, Target):
        if target._op is None:
            return dict(target._spec, required_env=target._required_env)
        return {"name": target.name, "kind": target.kind, "action": target.action}
    if isinstance(target, tuple):
        return dict(zip(("name", "kind", "action"), (_wire(t) for t in target)))
    return {"name": target}


def _on_frame(ref: "weakref.ReferenceType[ConnectionOperation]"):
    """The frame callback of an operation: wakes its waiter and calls the change hook. It
    holds the operation weakly (the operation holds it)."""

    def on_frame(frame: Dict[str, Any]) -> None:
        operation = ref()
        if operation is not None:
            operation._changed(frame)
    return on_frame


class ConnectionOperation:
    """One connection operation. ``targets`` are ``Target``s, ``(name, kind, action)``
    tuples or names; ``session_key`` is where ``live.open`` registers it."""

    @staticmethod
    def on_change(operation: "ConnectionOperation", change: Dict[str, Any],
                  snapshot: Dict[str, Any]) -> None:
        """Called after every change with its record and the operation's snapshot; a host
        replaces it to forward changes."""

    def __init__(self, targets: Iterable[Any], session_key: str = "",
                 tool_call_id: Optional[str] = None, deadline: Optional[float] = None):
        from . import live

        targets = list(targets)
        self.session_key = session_key
        self.tool_call_id = tool_call_id
        self._wake: Optional[threading.Event] = threading.Event()
        seconds = OPERATION_DEADLINE_SECONDS if deadline is None else deadline
        self._handle = live.registry().detached(
            session_key, [_spec(t) for t in targets], deadline=float(seconds),
            tool_call_id=tool_call_id, on_update=_on_frame(weakref.ref(self)))
        self._bind_moves()
        live._remember(self)

    @classmethod
    def _adopt(cls, handle: connop.Operation) -> "ConnectionOperation":
        """The object for an operation a tool call started (its frames come through
        ``_changed`` from the tool's update callback)."""
        operation = cls.__new__(cls)
        operation.session_key = handle.session_key
        operation.tool_call_id = None
        # Made when first asked for: until then no frame of the tool call needs building
        # for it (see ``live.frames_wanted``).
        operation._wake = None
        operation._handle = handle
        operation._adopted_seq = handle.seq
        operation._bind_moves()
        return operation

    def _bind_moves(self) -> None:
        """``transition`` is the handle's own method on this object, unless a subclass
        overrides it: a card answer then reaches connop with no Python frame in between,
        which a thread waking from idle pays for in microseconds. (A patch of the class's
        ``transition`` made after this object exists does not reach it; patch the object.)"""
        if type(self).transition is ConnectionOperation.transition:
            self.__dict__["transition"] = self._handle.transition

    @property
    def wake(self) -> threading.Event:
        """Set on every change; a waiter clears it, then waits."""
        event = self._wake
        if event is None:
            from . import live

            event = threading.Event()
            self._wake = event
            live._waiting[self.op_id] = self
            # Set already if the operation changed since this object was made for it.
            if self._handle.seq != self._adopted_seq:
                event.set()
        return event

    def _changed(self, frame: Dict[str, Any]) -> None:
        if self._wake is not None:
            self._wake.set()
        if "target" in frame:
            change = {key: frame[key] for key in _CHANGE_KEYS}
            snapshot = {k: v for k, v in frame.items() if k not in _CHANGE_KEYS}
            type(self).on_change(self, change, snapshot)

    # ----- what it is ---------------------------------------------------------------------

    @property
    def op_id(self) -> str:
        return self._handle.op_id

    @property
    def targets(self) -> List[Target]:
        return [Target._bound(self._handle, name) for name in self._handle.target_names()]

    def target(self, name: str) -> Optional[Target]:
        """The row of ``name`` as it stands, or ``None``."""
        if self._handle.target(name) is None:
            return None
        return Target._bound(self._handle, name)

    def _field(self, key: str) -> Any:
        return self._handle.result()[key]

    seq = property(lambda self: self._field("seq"))
    deadline_at = property(lambda self: self._field("deadline_at"))
    settled_at = property(lambda self: self._field("settled_at"))

    @property
    def settled_by(self) -> Optional["_c.SettleReason"]:
        by = self._field("settled_by")
        return None if by is None else _c.SettleReason(by)

    @property
    def settled(self) -> bool:
        return self._handle.settled

    def remaining_seconds(self) -> float:
        """Seconds left to the deadline (negative once past)."""
        return self.deadline_at - time.time()

    # ----- moves --------------------------------------------------------------------------

    def transition(self, name: str, to: Any, actor: Any, **fields: Any) -> Optional[Dict[str, Any]]:
        """Moves a target; returns the change record, or ``None`` for a move to the state it
        is in. Raises ``IllegalTransition``. ``detail``, ``connect_url`` and
        ``connection_id`` replace the row's; any other keyword is attached to the row."""
        return self._handle.transition(name, to, actor, **fields)

    def refresh(self, name: str, connect_url: Optional[str] = None, detail: Optional[str] = None,
                actor: Any = _c.Actor.user) -> Dict[str, Any]:
        """New link and detail, no state change."""
        return self._handle.refresh(name, connect_url=connect_url, detail=detail, actor=actor)

    def settle(self, reason: Any) -> bool:
        """Settles once: ``True`` for the call that did."""
        return self._handle.settle(reason)

    def settle_if_all_resolved(self) -> bool:
        return self._handle.settle_if_all_resolved()

    # ----- reads --------------------------------------------------------------------------

    def result(self, with_urls: bool = True) -> Dict[str, Any]:
        """The operation as it stands: live while open, frozen once settled."""
        result = self._handle.result()
        if not with_urls:
            for target in result["targets"]:
                target.pop("connect_url", None)
        return result

    snapshot = result

    def request_payload(self) -> Dict[str, Any]:
        """The card request as it would be now."""
        return self._handle.request_payload()

    def __getattr__(self, name: str) -> Any:
        # respond, continue_, interrupt, view, tool_result: the handle's own.
        handle = self.__dict__.get("_handle")
        if handle is None:
            raise AttributeError(name)
        return getattr(handle, name)

    def __repr__(self) -> str:
        return f"ConnectionOperation(op_id={self.op_id!r}, settled={self.settled})"


# The change hook as the class defines it: a host that replaced it wants every change.
NO_HOOK = ConnectionOperation.__dict__["on_change"].__func__
