"""The ``manage_connections`` tool as the original agent calls it: arguments, a client
factory, the card callback and the session id; the result is JSON text in the original's
words. The checks come in the original's order, each decided by connop's core: the
arguments (and the host's ``connectors_available`` gate) before any client is built, then
the client (a factory that raises is the gateway's error), then the call itself."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional

import connop

from .. import interrupt as _interrupt
from . import live, managed
from . import operation as _operation
from .gateway import client as _client

DIALECT = "original"

#: The tool's declaration for the model (name, description, JSON Schema of the arguments).
MANAGE_CONNECTIONS_SCHEMA: Dict[str, Any] = connop.tool_schema(dialect=DIALECT)

# The layer's own ``hosted_names``: when a host leaves it in place, connop reads the
# gateway's connector list itself (any gateway, the HTTP client included).
_DEFAULT_HOSTED_NAMES = managed.hosted_names


def _frame(frame: Dict[str, Any]) -> None:
    """A tool call's update frame, to the host's object for its operation, if one was made
    (``live.get``): it wakes that object's waiter and calls its change hook."""
    operation = live._objects.get(frame.get("op_id"))
    if operation is not None:
        operation._changed(frame)


def manage_connections(
    args: Any,
    client_factory: Optional[Callable[[], Any]] = None,
    connection_callback: Optional[Callable[[dict], Any]] = None,
    session_id: Optional[str] = None,
    tool_call_id: Optional[str] = None,
    connectors_available: Optional[bool] = None,
    **_host: Any,
) -> str:
    """Runs one tool call on this thread. Everything a host may set is read now: the surface,
    the tick, the deadline, the local catalog and the hosted names."""
    if not isinstance(args, (dict, str)):
        args = dict(args or {})
    # connop checks the arguments, then builds the client (a factory that raises is the
    # gateway's error).
    factory = client_factory or _client.default_client
    hosted = managed.hosted_names
    hosted_names = None
    if hosted is not _DEFAULT_HOSTED_NAMES:
        # A host's ``hosted_names`` takes the client connop built (the misroute check comes
        # after the mint).
        built = []

        def factory(make=factory):
            built.append(make())
            return built[-1]

        def hosted_names():
            return hosted(built[-1])

    tid = threading.get_ident()
    token = _interrupt.token_for(tid)
    try:
        return connop.manage_connections(
            args,
            session_key=session_id or "default",
            gateway_factory=factory,
            surface=connop.surface_of_platform(_client.session_platform() or ""),
            on_card=connection_callback,
            on_update=_frame if connection_callback is not None else None,
            # Frames only for operations whose object (``live``) is waited on, or every held
            # one's while a host replaced the change hook: no other frame is built.
            updates_for=live.frames_wanted(),
            tick=float(managed.WATCH_TICK_SECONDS),
            deadline=float(_operation.OPERATION_DEADLINE_SECONDS),
            local_catalog=sorted(managed.catalog_names() or ()),
            hosted_names=hosted_names,
            desktop_return_to=_client.desktop_return_to(),
            interrupt=token,
            registry=live.registry(),
            tool_call_id=tool_call_id,
            dialect=DIALECT,
            available=connectors_available is not False,
            # The original ran a client object's calls on the tool call's own thread, one at
            # a time, and its tests rely on it (a read that settles the operation finishes
            # before the call returns); connop's HTTP client keeps its calls off that thread.
            calls="inline",
        )
    finally:
        _interrupt.release(tid, token)
