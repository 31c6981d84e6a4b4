"""Per-thread interrupt flags, as the original agent keeps them: the thread that runs a tool
call is interrupted by its id. Each flag is a ``connop.Interrupt`` token, so setting it
settles that thread's open operation at once."""

from __future__ import annotations

import threading
from typing import Dict, Optional

import connop

_lock = threading.Lock()
_tokens: Dict[int, connop.Interrupt] = {}


def token_for(thread_id: Optional[int] = None) -> connop.Interrupt:
    """The token of a thread (the calling one by default), made on first use."""
    tid = threading.get_ident() if thread_id is None else thread_id
    token = _tokens.get(tid)  # one dict read is atomic; the lock only guards the making
    if token is not None:
        return token
    with _lock:
        return _tokens.setdefault(tid, connop.Interrupt())


def set_interrupt(active: bool, thread_id: Optional[int] = None) -> None:
    """Interrupts (``True``) or clears (``False``) a thread's tool calls."""
    if active:
        token_for(thread_id).trigger()
        return
    tid = threading.get_ident() if thread_id is None else thread_id
    with _lock:
        token = _tokens.pop(tid, None)
    if token is not None:
        token.reset()


def is_interrupted(thread_id: Optional[int] = None) -> bool:
    """Whether a thread (the calling one by default) is interrupted."""
    tid = threading.get_ident() if thread_id is None else thread_id
    with _lock:
        token = _tokens.get(tid)
    return token is not None and token.triggered


def release(thread_id: int, token: connop.Interrupt) -> None:
    """Forgets a thread's token once its tool call returned, unless it is set (a flag set
    for the thread stays until cleared)."""
    with _lock:
        if _tokens.get(thread_id) is token and not token.triggered:
            del _tokens[thread_id]
