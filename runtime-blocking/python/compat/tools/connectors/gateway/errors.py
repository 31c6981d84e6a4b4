"""The tool gateway client's errors, as the original's ``gateway.errors`` names them. A
gateway object raising ``RateLimited`` is backed off like the gateway's HTTP 429: no row's
account is read for ``retry_after`` seconds (connop decides, see ``connop.RateLimited``)."""

from __future__ import annotations

import connop


class ConnectorGatewayError(connop.ConnopError):
    """A call to the tool gateway failed."""


class RateLimited(connop.RateLimited, ConnectorGatewayError):
    """The gateway refused a call for now (HTTP 429); ``retry_after`` in seconds, or
    ``None`` for the default wait."""

    def __init__(self, message: str = "rate limited", retry_after=None):
        super().__init__(message, retry_after=retry_after)


__all__ = ["ConnectorGatewayError", "RateLimited"]
