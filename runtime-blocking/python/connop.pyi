"""connop: connection operations for AI-agent gateways, run by connop's blocking runtime.

``manage_connections`` runs one tool call on the calling thread and releases the GIL while it
waits. Other threads reach the operation through the registry (``current``, ``get``), its
``Operation`` handle, or an ``Interrupt`` token. Every rule (legal moves, when to settle, what
the result holds) is decided by connop's core. The contract the module follows (arguments,
returns, exceptions, threads, payloads, limits) is docs/python.md in connop's repository.
"""

from typing import (Any, Callable, Container, Iterable, Literal, Mapping, Optional, Protocol,
                    Sequence, Tuple, Union)

__version__: str

class TargetState:
    """Where a target stands; ``value`` is the wire name."""
    pending: "TargetState"
    initiated: "TargetState"
    connected: "TargetState"
    skipped: "TargetState"
    failed: "TargetState"
    expired: "TargetState"
    not_connected: "TargetState"
    @property
    def value(self) -> str: ...

class Actor:
    """Who asks for a move; each edge of the table has exactly one."""
    user: "Actor"
    backend_watcher: "Actor"
    clock: "Actor"
    @property
    def value(self) -> str: ...

class SettleReason:
    """Why an operation settled. ``continue_`` has the wire name ``continue``."""
    all_resolved: "SettleReason"
    continue_: "SettleReason"
    deadline: "SettleReason"
    interrupt: "SettleReason"
    @property
    def value(self) -> str: ...

class Kind:
    """What a target is."""
    connector: "Kind"
    mcp: "Kind"
    @property
    def value(self) -> str: ...

class TargetAction:
    """What was asked for a target."""
    connect: "TargetAction"
    reconnect: "TargetAction"
    install: "TargetAction"
    enable: "TargetAction"
    authorize: "TargetAction"
    @property
    def value(self) -> str: ...

class ConnopError(Exception):
    """Every error connop raises (the value errors below are also ``ValueError``s)."""

class IllegalTransition(ConnopError, ValueError):
    """A move the transition table does not allow, or an unknown target: nothing changed."""

class InvalidAnswer(ConnopError, ValueError):
    """A card answer refused whole, nothing moved: not of the answer's shape, a status not in
    ``allowed``, or a name that is not one of the operation's targets."""
    allowed: Tuple[str, ...]
    """The statuses an answer may give a target: ``("skipped", "approved")``."""

class NoOperation(ConnopError):
    """The tool call has no connection operation."""

class OperationAlreadyOpen(ConnopError):
    """The session has an open operation: ``args == (message, open_op_id)``."""

class GatewayClientError(ConnopError):
    """connop's HTTP client could not be built."""

class GatewayObject(Protocol):
    """The original client's three methods, with its shapes: snake_case rows, ``None`` for an
    account the gateway does not know yet. An exception, or an answer of another shape, is a
    failure of that call."""
    def list_connectors(self, *, timeout: Optional[float]) -> Sequence[Mapping[str, Any]]: ...
    def connections(self, connectors: Sequence[str], *, reinitiate: bool,
                    return_to: Optional[str], op: Optional[str]) -> Mapping[str, Any]: ...
    def account_status(self, connection_id: str, *,
                       timeout: Optional[float]) -> Optional[Mapping[str, Any]]: ...

class HttpGateway:
    """connop's HTTP client of the tool gateway; its calls run without the GIL."""
    def __init__(self, url: str, token: str) -> None:
        """The gateway at ``url`` (``http://`` or ``https://``) with ``token`` as its bearer
        token. ``ValueError`` for another kind of URL or an empty token."""
    @staticmethod
    def from_env() -> Optional["HttpGateway"]:
        """The gateway ``CONNECTOR_GATEWAY_URL`` and ``CONNECTOR_GATEWAY_TOKEN`` name, or
        ``None`` when the URL is unset. With the URL and no token it still builds, and each
        call fails with an authorization error, without sending."""
    @property
    def url(self) -> str: ...

class Operation:
    """A handle on one operation, usable from any thread; every change wakes its watcher.

    A change keeps the GIL while it runs (letting it go only to wait for another thread that
    runs a callback), so the changing thread's next line runs before the woken waiting thread
    returns, as with an operation written in Python."""
    @property
    def op_id(self) -> Optional[str]: ...
    @property
    def settled(self) -> bool: ...
    @property
    def seq(self) -> int:
        """The change counter: one more with every change (the ``seq`` of its result and
        frames)."""
    def transition(self, name: str, to: Union[TargetState, str], actor: Union[Actor, str], *,
                   detail: Optional[str] = None, connect_url: Optional[str] = None,
                   connection_id: Optional[str] = None) -> Optional[dict]:
        """Moves a target; returns the change record, or ``None`` for a no-op. Raises
        ``IllegalTransition``."""
    def refresh(self, name: str, *, connect_url: Optional[str] = None,
                detail: Optional[str] = None,
                actor: Union[Actor, str, None] = None) -> dict:
        """New link and detail, no state change; returns the change record."""
    def settle(self, reason: Union[SettleReason, str]) -> bool:
        """The compare-and-set settle: ``True`` for the call that won."""
    def interrupt(self) -> bool:
        """Settles ``interrupt`` at once; ``True`` if this call settled it."""
    def respond(self, answer: Mapping[str, Any]) -> dict:
        """A card answer ``{"targets": [{"name", "status"}], "settled_by"?: "continue"}``, each
        status in ``InvalidAnswer.allowed``, each name a target of the operation; returns
        ``{"status": "ok", "settled": bool}``. Raises ``InvalidAnswer`` (nothing moved)."""
    def continue_(self) -> bool:
        """Continue; returns whether the operation is settled now."""
    def view(self) -> Optional[dict]:
        """The operation view: ``op_id``, ``seq``, ``deadline_at``, ``settled_at``,
        ``settled_by``, ``settled`` and ``targets`` (links and connection ids included)."""
    def result(self) -> Optional[dict]:
        """The operation as it stands: live while open, frozen once settled, links
        included."""
    def tool_result(self) -> Optional[str]:
        """The tool call's JSON result once it returned."""
    # An operation made by ``Registry.detached``, and what any host reads of one:
    @property
    def session_key(self) -> str: ...
    def register(self, *, profile: Optional[str] = None) -> None:
        """Registers it under its session key; raises ``OperationAlreadyOpen``."""
    def close(self) -> None:
        """Removes its registry entry if the entry is still this operation."""
    def observe(self, gateway: Any) -> None:
        """One watcher pass: each live row with an account id read once, on this thread."""
    def request_payload(self) -> Optional[dict]:
        """The card request as it would be now."""
    def settle_if_all_resolved(self) -> bool: ...
    def target(self, name: str) -> Optional[dict]:
        """One row as it stands (with ``snapshot`` and ``next_read_at``), or ``None``."""
    def target_names(self) -> list: ...
    def set_required_env(self, name: str, env: Optional[list]) -> None: ...

class Registry:
    """One open operation per session key; settled ones stay readable by ``get``."""
    def __init__(self, profile: Optional[str] = None) -> None: ...
    @staticmethod
    def default() -> "Registry":
        """The process's registry, used when ``manage_connections`` gets none."""
    def current(self, session_key: str) -> Optional[Operation]:
        """The session's unsettled operation, or ``None``."""
    def get(self, session_key: str, op_id: str) -> Optional[Operation]:
        """The session's operation with that id, open or settled, or ``None``. A settled one
        is forgotten once a newer operation of the session settled, or 64 operations of
        other sessions settled after it."""
    def open(self, session_key: str,
             targets: Iterable[Union[str, Tuple[str, str, str]]], *,
             deadline: float = 300.0, on_update: Optional[Callable[[dict], Any]] = None,
             interrupt: Optional["Interrupt"] = None) -> Operation:
        """Registers an operation the host moves itself: no gateway call, no watcher, and no
        timer (its deadline is recorded, not enforced). Raises ``OperationAlreadyOpen``."""
    def __len__(self) -> int:
        """How many operations are open."""
    def detached(self, session_key: str, targets: Iterable[Any], *, deadline: float = 300.0,
                 tool_call_id: Optional[str] = None,
                 on_update: Optional[Callable[[dict], Any]] = None) -> Operation:
        """An operation that exists before it registers; only its host settles it."""
    def for_profile(self, profile: str) -> "Registry":
        """The same entries seen from another profile."""
    def clear(self) -> None:
        """Forgets every entry."""

class Interrupt:
    """A turn's interrupt token: ``trigger()`` settles every attached operation ``interrupt``
    at once, and every one attached later, until ``reset()``."""
    def __init__(self) -> None: ...
    def trigger(self) -> None: ...
    def reset(self) -> None: ...
    @property
    def triggered(self) -> bool: ...

def manage_connections(
    args: Union[Mapping[str, Any], str],
    *,
    session_key: str,
    gateway: Optional[Union[HttpGateway, GatewayObject]] = None,
    gateway_factory: Optional[Callable[[], Union[HttpGateway, GatewayObject]]] = None,
    surface: Literal["", "desktop", "tui", "cli", "messaging"] = "",
    on_card: Optional[Callable[[dict], Any]] = None,
    on_update: Optional[Callable[[dict], Any]] = None,
    updates_for: Optional[Container[str]] = None,
    tick: float = 1.0,
    deadline: float = 300.0,
    local_catalog: Sequence[str] = (),
    hosted_names: Optional[Callable[[], Optional[Iterable[str]]]] = None,
    tool_call_id: Optional[str] = None,
    return_to: Optional[str] = None,
    desktop_return_to: Optional[str] = None,
    interrupt: Optional[Interrupt] = None,
    registry: Optional[Registry] = None,
    agent_session_id: Optional[str] = None,
    calls: Optional[Literal["worker", "inline"]] = None,
    dialect: Optional[Literal["connop", "original"]] = None,
    available: bool = True,
) -> str:
    """Runs one ``manage_connections`` tool call on this thread and returns its JSON result.

    ``args``: ``{"action", "connectors", "force"}`` (or that as JSON text), JSON data nested at
    most 127 deep. ``surface``: ``""`` (unset) or ``desktop`` or ``tui`` show a card when
    ``on_card`` is given, and the call blocks until the operation settles; ``cli`` and
    ``messaging`` (a chat platform) return the links at once. ``on_card`` gets the card request
    once: an exception it raises settles the operation ``interrupt`` at once and is raised
    here. ``on_update`` gets every update frame (with ``updates_for``, a container of
    operation ids, only the frames of the operations in it, asked frame by frame, so a frame
    no one wants is never built); an exception it raises is reported as unraisable. ``tick``: seconds between a row's reads, at least 0.01 (a smaller one, 0
    included, reads every 0.01 s). ``gateway``: an ``HttpGateway`` or a gateway object; or,
    instead, ``gateway_factory``, called once the arguments passed the check (a refused call
    builds no client), an ``Exception`` it raises being the tool's "gateway failed" result.
    ``hosted_names`` answers the misroute check instead of the
    connector list (``None`` from it: unknown). ``desktop_return_to`` names the desktop app
    sent as ``returnTo`` on the desktop surface (default ``connop-desktop``); ``return_to`` is
    sent on every surface. ``calls``: ``"worker"`` (the default) runs gateway calls on a pool
    shared by every operation, so the deadline, an interrupt and a card answer never wait for
    a slow call (the gateway object may be called from two threads at once); ``"inline"`` runs
    a gateway object's calls on the waiting thread, for one that answers at once, its reads one
    at a time, each with the time then left, none once the deadline came (an
    ``HttpGateway``'s calls stay on the pool). Ctrl-C on the main
    thread settles the operation ``interrupt`` and the call returns that result.
    ``dialect``: ``"connop"`` (the default) or ``"original"`` (the original agent system's words
    and argument forms); ``available=False`` refuses valid arguments (connectors are not
    offered in the session).

    Raises ``TypeError``/``ValueError`` for an argument of the wrong type or value (naming it
    and what it takes) before anything runs. Everything else (refused tool arguments, a failed
    gateway call) is the JSON result's ``error``.
    """

def current(session_key: str) -> Optional[Operation]:
    """The process registry's unsettled operation of a session."""

def get(session_key: str, op_id: str) -> Optional[Operation]:
    """The process registry's operation of a session by id, open or settled (see
    ``Registry.get`` for when a settled one is forgotten)."""


# ----- a host laying another system's module layout over connop --------------------------

class RateLimited(ConnopError):
    """The tool gateway refused a call for now (HTTP 429). A gateway object raises it; no
    row's account is then read for ``retry_after`` seconds (1 s when ``None``)."""
    retry_after: Optional[float]
    def __init__(self, message: str = "rate limited", retry_after: Optional[float] = None) -> None: ...

class TransportGateway:
    """The tool gateway's client over the host's HTTP transport (every rule connop's):
    ``transport.request(method, url, *, headers, json, timeout)`` returns a response with
    ``status_code``, ``text`` (or ``json()``) and optionally ``headers``; raising
    ``TimeoutError`` means it timed out. ``endpoint_resolver()`` names the origin (or
    ``None``); ``header_provider(url)`` gives each request's credentials."""
    def __init__(self, *, transport: Any, endpoint_resolver: Callable[[], Optional[str]],
                 header_provider: Optional[Callable[[str], Mapping[str, str]]] = None) -> None: ...
    def list_connectors(self, *, timeout: Optional[float] = None) -> list: ...
    def connections(self, connectors: Sequence[str], *, reinitiate: bool = False,
                    return_to: Optional[str] = None, op: Optional[str] = None) -> dict: ...
    def account_status(self, connection_id: str, *,
                       timeout: Optional[float] = None) -> Optional[dict]: ...

def contract_table() -> dict:
    """The contract as data: ``kinds``, ``states``, ``actors``, ``actions``,
    ``settle_reasons`` (each ``[python name, wire value]``), ``resolved``, and ``edges``
    (``[kind, from, to, actor]``)."""

def allowed(kind: Union[Kind, str], from_: Union[TargetState, str],
            to: Union[TargetState, str]) -> Optional[str]:
    """The one actor allowed to make that move, by wire name, or ``None``."""

def check_args(args: Union[Mapping[str, Any], str], *, dialect: Optional[str] = None,
               available: bool = True) -> Optional[str]:
    """The tool's refusal of these arguments as its JSON result, or ``None``."""

def gateway_failed(reason: str, *, dialect: Optional[str] = None) -> str:
    """The tool's JSON result when the gateway cannot be reached, saying why."""

def surface_of_platform(platform: str) -> str:
    """The surface a host's platform name stands for: ``""``, ``desktop``, ``tui``, ``cli``,
    or ``messaging`` for any other."""

def tool_schema(*, dialect: Optional[str] = None) -> dict:
    """The tool's declaration for the model: ``name``, ``description``, ``parameters``."""
