"""The contract's vocabulary and its transition table, as the original's ``contract`` module
offers them. Every member, edge and answer comes from connop's core (``connop.contract_table``,
``connop.allowed``); this module only gives them the original's Python shapes: string enums
that iterate and build from a value, ``KINDS``, ``TRANSITIONS`` (``(kind, from) -> {to:
actor}``), ``RESOLVED_STATES`` and ``allowed``."""

from __future__ import annotations

import enum
from typing import Dict, FrozenSet, Optional, Tuple

import connop

_TABLE = connop.contract_table()


def _vocabulary(name: str, members) -> type:
    made = enum.Enum(name, [(python, wire) for python, wire in members], type=str,
                     module=__name__)
    made.__str__ = lambda self: self.value  # type: ignore[method-assign]
    return made


TargetState = _vocabulary("TargetState", _TABLE["states"])
Actor = _vocabulary("Actor", _TABLE["actors"])
Kind = _vocabulary("Kind", _TABLE["kinds"])
TargetAction = _vocabulary("TargetAction", _TABLE["actions"])
SettleReason = _vocabulary("SettleReason", _TABLE["settle_reasons"])

#: Every kind the transition table has edges for.
KINDS: Tuple = tuple(Kind)

#: ``(kind, from) -> {to: the one actor allowed}``; a state nothing leaves has no entry.
TRANSITIONS: Dict[Tuple, Dict] = {}
for _kind, _from, _to, _actor in _TABLE["edges"]:
    TRANSITIONS.setdefault((Kind(_kind), TargetState(_from)), {})[TargetState(_to)] = Actor(_actor)

#: The states that resolve a target.
RESOLVED_STATES: FrozenSet = frozenset(TargetState(s) for s in _TABLE["resolved"])


def allowed(kind, from_state, to_state) -> Optional["Actor"]:
    """The one actor allowed to move a target of ``kind`` from ``from_state`` to
    ``to_state``, or ``None``."""
    actor = connop.allowed(str(kind.value if isinstance(kind, enum.Enum) else kind),
                           _wire(from_state), _wire(to_state))
    return None if actor is None else Actor(actor)


def _wire(member) -> str:
    return member.value if isinstance(member, enum.Enum) else str(member)


__all__ = ["Actor", "KINDS", "Kind", "RESOLVED_STATES", "SettleReason", "TRANSITIONS",
           "TargetAction", "TargetState", "allowed"]
