"""The contract's vocabulary: connop's own enums (wire values in ``.value``)."""

from connop import Actor, Kind, SettleReason, TargetAction, TargetState

__all__ = ["Actor", "Kind", "SettleReason", "TargetAction", "TargetState"]
