"""The tool gateway's client, and which surface the session runs on.

``session_platform()`` names the surface (``desktop``, ``tui``, ``cli``, a messaging platform,
or empty); the core decides card or links from it and sends the desktop app's name as
``returnTo`` on the desktop surface only. The original's hosted gateway knows its own apps:
``hermes-desktop``, or ``hermes-desktop-dev`` when ``HERMES_DESKTOP_DEV_SERVER`` is set.
"""

from __future__ import annotations

import connop

DESKTOP_APP = "hermes-desktop"
DESKTOP_DEV_APP = "hermes-desktop-dev"


# ``os.environ.get`` without its exception for an unset name (every tool call asks).
_getenv = connop._getenv


def session_platform() -> str:
    """The session's surface: ``HERMES_SESSION_PLATFORM``, else empty (unset)."""
    return _getenv("HERMES_SESSION_PLATFORM") or ""


def desktop_return_to() -> str:
    """The desktop app's name for the mint's ``returnTo``."""
    return DESKTOP_DEV_APP if _getenv("HERMES_DESKTOP_DEV_SERVER") else DESKTOP_APP


class ConnectorClient(connop.TransportGateway):
    """The tool gateway's client over a host's HTTP transport, as the original's
    ``ConnectorClient(transport=, endpoint_resolver=, header_provider=)``:
    ``transport.request(method, url, *, headers, json, timeout)`` sends one request;
    ``endpoint_resolver()`` names the gateway's origin; ``header_provider(url)`` gives each
    request's credentials. Routes, bodies, pagination, retries and status mapping are
    connop's; its calls run on the tool call's thread, one at a time."""


def default_client() -> connop.HttpGateway:
    """connop's HTTP client for ``CONNECTOR_GATEWAY_URL`` / ``CONNECTOR_GATEWAY_TOKEN``."""
    client = connop.HttpGateway.from_env()
    if client is None:
        raise RuntimeError("CONNECTOR_GATEWAY_URL is not set: no connector gateway to call")
    return client
