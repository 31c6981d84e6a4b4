"""What the managed tool reads from its host at each call: the watcher tick, the local MCP
catalog, which connector names the hosted gateway offers (the misroute check), and the
session's surface."""

from __future__ import annotations

from typing import Any, Iterable, Optional, Set

from .gateway.client import session_platform  # noqa: F401  (a seam hosts patch here too)

WATCH_TICK_SECONDS: float = 1.0


def catalog_names() -> Set[str]:
    """Names the local MCP catalog serves. This layer has no MCP configuration of its own: a
    host sets or patches this."""
    return set()


def hosted_names(client: Any = None) -> Optional[Iterable[str]]:
    """Names the hosted gateway offers, asked only when the misroute check has candidates;
    ``None`` when they cannot be known (then nothing is misrouted). Left in place, connop
    reads the gateway's connector list itself instead of calling this; a host (or a test)
    that replaces it answers the check."""
    if client is None:
        return None
    try:
        rows = client.list_connectors()
    except Exception:
        return None
    if isinstance(rows, dict):
        rows = rows.get("items", ())
    return {row["connector"] for row in rows if isinstance(row, dict) and "connector" in row}


def _observe(client: Any, operation: Any) -> None:
    """One pass of the watcher over a host's operation: each live target with an account id
    is read once through ``client.account_status``, on this thread, with connop's rules (the
    moves, late reads dropped, a rate limit holding every target back)."""
    operation._handle.observe(client)
