"""The ``manage_connections`` tool as the original agent calls it: arguments, a client
factory, the card callback and the session id; the result is JSON text."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import connop

from .. import interrupt as _interrupt
from . import live, managed
from . import operation as _operation
from .gateway import client as _client

# The layer's own ``hosted_names``: when a host leaves it in place, connop reads the
# gateway's connector list itself (any gateway, the HTTP client included).
_DEFAULT_HOSTED_NAMES = managed.hosted_names


def manage_connections(
    args: Any,
    client_factory: Optional[Callable[[], Any]] = None,
    connection_callback: Optional[Callable[[dict], Any]] = None,
    session_id: Optional[str] = None,
    tool_call_id: Optional[str] = None,
    **_host: Any,
) -> str:
    """Runs one tool call on this thread. Everything a host may set is read now: the surface,
    the tick, the deadline, the local catalog and the hosted names."""
    gateway = (client_factory or _client.default_client)()
    hosted = managed.hosted_names
    hosted_names = None if hosted is _DEFAULT_HOSTED_NAMES else (lambda: hosted(gateway))
    tid = threading.get_ident()
    token = _interrupt.token_for(tid)
    try:
        return connop.manage_connections(
            args if isinstance(args, (dict, str)) else dict(args or {}),
            session_key=session_id or "default",
            gateway=gateway,
            surface=_client.session_platform() or "",
            on_card=connection_callback,
            tick=float(managed.WATCH_TICK_SECONDS),
            deadline=float(_operation.OPERATION_DEADLINE_SECONDS),
            local_catalog=sorted(managed.catalog_names() or ()),
            hosted_names=hosted_names,
            desktop_return_to=_client.desktop_return_to(),
            interrupt=token,
            registry=live.registry(),
            tool_call_id=tool_call_id,
            # The original ran a client object's calls on the tool call's own thread, and its
            # tests rely on it (a read that settles the operation finishes before the call
            # returns); connop's HTTP client keeps its calls off that thread.
            calls=None if isinstance(gateway, connop.HttpGateway) else "inline",
        )
    finally:
        _interrupt.release(tid, token)
