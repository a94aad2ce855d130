"""Keeping secrets out of what a person sees: redacted server text, safe endpoint names.

Error messages quote what servers said, and servers echo credentials: OpenAI's 401 body
names the key it refused, masked (``sk-abc1***...wxyz``); proxies echo headers. Every
server-provided text passes through ``redact`` before it reaches a message, and an
endpoint is only ever shown as ``scheme://host:port``.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

REDACTED = "[redacted]"

# The shortest string treated as a secret: placeholders such as "none" or "ollama" are
# not secrets, and replacing them would mangle ordinary words.
_MIN_SECRET = 8
# Secrets at least this long also have their visible ends (as servers echo them) redacted.
_MIN_SECRET_WITH_PARTS = 16

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # "Authorization: Bearer x", "authorization": "x", api_key=x
    (
        re.compile(
            r"""(?i)((?:authorization|api[_-]?key)["']?\s*[:=]\s*["']?)(?:bearer\s+)?[^\s"',;}]+"""
        ),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(?i)\bbearer\s+[^\s\"',;}]+"), "Bearer " + REDACTED),
    # OpenAI-style keys, whole or masked: sk-..., sk-proj-..., rk-..., sess-...
    (re.compile(r"\b(?:sk|rk|pk|sess)-[\w\-*.…]{2,}[\w*]"), REDACTED),
    # A masked token with visible ends: abc1****wxyz, abc1...wxyz, abc1…wxyz. Matched from
    # the start of a word only, and without backtracking into a run (atomic, possessive):
    # tried at every character, a long run of word characters, dots or stars in a server's
    # error body took quadratic time (100,000 characters: minutes of CPU, the kernel frozen).
    (
        re.compile(r"(?<![\w\-])[\w\-]++(?>\*{2,}|\.{3,}|…)(?:[*.…]*+[\w\-]++)++"),
        REDACTED,
    ),
)


def redact(text: str, secret: str | None = None) -> str:
    """``text`` with anything key-like, ``secret`` itself and its visible ends removed."""
    if secret and len(secret) >= _MIN_SECRET:
        text = text.replace(secret, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    if secret and len(secret) >= _MIN_SECRET_WITH_PARTS:
        parts = (secret[:8], secret[-4:])
        text = re.sub(r"\S+", lambda m: REDACTED if _shows(m.group(), parts) else m.group(), text)
    return text


def _shows(token: str, parts: tuple[str, ...]) -> bool:
    return any(part in token for part in parts)


def endpoint_of(url: str) -> str:
    """``scheme://host:port`` of ``url``: no credentials, path or query."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(invalid URL)"
    host = parts.hostname
    if not host or parts.scheme not in ("http", "https"):
        return "(invalid URL)"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    port = port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{host}:{port}"


def host_port(url: str) -> str:
    """``host:port`` of ``url`` (for "cannot connect to ..." messages)."""
    endpoint = endpoint_of(url)
    return endpoint.split("://", 1)[1] if "://" in endpoint else endpoint
