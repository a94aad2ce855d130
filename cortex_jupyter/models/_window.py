"""The context window a server really serves, where it says (once per endpoint and model).

A model's name does not tell its window: llama.cpp serves whatever ``-c`` it was started
with (SmolLM2 at 8,192, not the 32,000 cortex assumes), vLLM whatever
``--max-model-len`` says. Both report it:

- llama.cpp: ``GET /props`` -> ``{"default_generation_settings": {"n_ctx": 8192, ...}}``
  (at the server's root, beside ``/v1``);
- vLLM: ``GET /v1/models`` -> ``{"data": [{"id": MODEL, "max_model_len": 8192}, ...]}``
  (newer llama.cpp also says ``"meta": {"n_ctx": 8192}`` there).

Asked once per endpoint and model and cached for the process (a failure too), with a
short timeout; anything unexpected means "unknown", never a failed run.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread
import httpx

from ._tls import tls_context

__all__ = ["PROBE_TIMEOUT", "known_window", "learn_window", "server_window"]

#: Seconds the whole probe may take (both questions).
PROBE_TIMEOUT = 2.0
# (base URL, model) -> the window, None when the server did not say.
_CACHE: dict[tuple[str, str], int | None] = {}
# Hosted APIs that answer neither question: not asked.
_SILENT_HOSTS = ("api.openai.com",)


def known_window(base_url: str, model: str) -> int | None:
    """The window cached for ``base_url`` and ``model`` (None: unknown or not asked)."""
    return _CACHE.get((base_url.rstrip("/"), model))


def learn_window(base_url: str, model: str, window: int) -> None:
    """Keep ``window`` as what ``base_url`` serves ``model`` with: a server said so in
    another way (a refused reply cap: ``_limits``)."""
    _CACHE[(base_url.rstrip("/"), model)] = window


async def server_window(base_url: str, model: str, api_key: str) -> int | None:
    """The context window the server at ``base_url`` serves ``model`` with, or None."""
    key = (base_url.rstrip("/"), model)
    if key in _CACHE:
        return _CACHE[key]
    window = None
    if not any(host in base_url for host in _SILENT_HOSTS):
        # The requests' own TLS context, built here in a thread (not on the loop) the
        # first time: the cell's first request then finds it ready. When it cannot be
        # built (a bad SSL_CERT_FILE: this machine's fault, not the server's answer),
        # nothing is kept, so the window is asked again once that is fixed.
        try:
            verify = await anyio.to_thread.run_sync(tls_context)
        except OSError:
            return None
        try:
            window = await _ask(key[0], model, api_key, verify)
        except Exception:  # any failure only means "unknown"
            window = None
    _CACHE[key] = window
    return window


async def _ask(base: str, model: str, api_key: str, verify: ssl.SSLContext) -> int | None:
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(
        timeout=PROBE_TIMEOUT / 2, headers=headers, verify=verify
    ) as client:
        props = await client.get(f"{root}/props")
        if props.status_code == 200:
            window = _n_ctx(props.json())
            if window is not None:
                return window
        models = await client.get(f"{base}/models")
        if models.status_code == 200:
            return _max_model_len(models.json(), model)
    return None


def _n_ctx(body: Any) -> int | None:
    settings = body.get("default_generation_settings") if isinstance(body, Mapping) else None
    value = settings.get("n_ctx") if isinstance(settings, Mapping) else None
    return _positive(value)


def _max_model_len(body: Any, model: str) -> int | None:
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return None
    for entry in data:
        if isinstance(entry, Mapping) and entry.get("id") == model:
            meta = entry.get("meta")
            served = meta.get("n_ctx") if isinstance(meta, Mapping) else None
            return _positive(entry.get("max_model_len")) or _positive(served)
    return None


def _positive(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None
