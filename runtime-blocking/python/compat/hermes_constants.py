"""The profile home, as the original agent system names it: the process's home
(``HERMES_HOME``, else ``~/.hermes``), which a turn run for another profile overrides for
its own context. ``tools.connectors.live`` keys its registry by it: two profiles served by
one process may use the same session key without seeing each other's operations."""

from __future__ import annotations

import contextvars
import functools
import os
from pathlib import Path
from typing import Optional, Union

import connop

# ``os.environ.get`` without its exception for an unset name (every tool call asks).
_getenv = connop._getenv

_override: "contextvars.ContextVar[Optional[str]]" = contextvars.ContextVar(
    "hermes_home_override", default=None)


def process_hermes_home() -> Path:
    """The process's own profile home, whatever a turn overrides."""
    return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes")


def get_hermes_home() -> Path:
    """The profile home of the current context: its override, else the process's."""
    override = _override.get()
    return Path(override) if override else process_hermes_home()


def hermes_home_text(process: bool = False) -> str:
    """The profile home as text, the process's own with ``process``, without building a
    ``Path`` (every tool call asks for it; a caller that needs one name per folder resolves
    it, as ``tools.connectors.live`` does)."""
    override = None if process else _override.get()
    return override or _getenv("HERMES_HOME") or _default_home(_getenv("HOME"))


@functools.lru_cache(maxsize=16)
def _default_home(home: Optional[str]) -> str:
    """``~/.hermes`` for the user whose home is ``home`` (``$HOME``, read by the caller)."""
    return os.path.join(os.path.expanduser("~"), ".hermes")


def set_hermes_home_override(home: Union[str, Path]) -> contextvars.Token:
    """Runs the current context as the profile at ``home``; returns the token to reset."""
    return _override.set(os.fspath(home))


def reset_hermes_home_override(token: contextvars.Token) -> None:
    """Ends an override."""
    _override.reset(token)
