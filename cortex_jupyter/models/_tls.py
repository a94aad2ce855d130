"""The TLS context the model clients verify servers with, built once a process.

Building it loads the certificate store (30-100 ms of blocking file I/O), and every
request has a client of its own (``openai_client``'s module docstring), as has the
context-window probe (``_window``): both take this one instead.
"""

from __future__ import annotations

import os
import ssl
import sys
import threading
from typing import Any, cast

import openai

_LOCK = threading.Lock()
_CONTEXTS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def _after_fork_in_child() -> None:
    # A process forked while another thread held the lock (building the context; a
    # process-pool tool under the fork start method) would inherit it held for ever.
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _key() -> tuple[str | None, str | None]:
    return os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")


def http_library() -> Any:
    """The HTTP library under the SDK's client (``httpx2``; ``httpx`` in older SDKs)."""
    base = next(c for c in openai.DefaultAsyncHttpxClient.__mro__ if c.__name__ == "AsyncClient")
    return sys.modules[base.__module__.split(".")[0]]


def tls_context() -> ssl.SSLContext:
    """The context, built as the SDK's own client builds it (its HTTP library's
    ``create_ssl_context()``: the system's store, or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR``), once a process and again only when those variables change. An
    ``SSLContext`` is safe to share between threads and event loops."""
    key = _key()
    with _LOCK:
        context = _CONTEXTS.get(key)
        if context is None:
            context = _CONTEXTS[key] = http_library().create_ssl_context()
        return cast(ssl.SSLContext, context)


def certificate_file() -> str | None:
    """The file ``SSL_CERT_FILE`` names, the one the context loads when it is set (a
    directory in ``SSL_CERT_DIR`` is only read at a handshake, so it cannot fail here)."""
    return os.environ.get("SSL_CERT_FILE") or None


def tls_context_ready() -> bool:
    """Whether ``tls_context()`` would return at once."""
    return _key() in _CONTEXTS
