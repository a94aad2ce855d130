"""Which values are secrets: what of the environment a process's redaction hides.

A value is a secret when the variable holding it is named like a credential
(``CREDENTIAL_NAME``: ``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``...), and then
also the bare token after an authorization scheme it holds (``Bearer x``, ``Token x``,
``Basic x``: a client sends it and a tool prints it without the scheme); when it is a
header of an OTLP exporter (``HEADERS_NAME``); and, in any variable at all, the password
of a URL (``postgres://user:pass@host/db``) with the whole userinfo. Values shorter than
``MIN_SECRET`` characters are not secrets worth the damage of hiding them everywhere.
``runtime.core.trust.secrets`` hides them, in every form.
"""

from __future__ import annotations

import base64
import contextlib
import re
import urllib.parse
from collections.abc import Mapping

__all__ = ["CREDENTIAL_NAME", "HEADERS_NAME", "MIN_SECRET", "in_environment"]

#: Environment variable names whose values are treated as secrets.
CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MIN_SECRET = 8
#: Environment variables holding an OTLP exporter's headers (``name=value,...``, values
#: percent-encoded): a collector's key travels there (``x-honeycomb-team=KEY``,
#: ``Authorization=Bearer KEY``), under a name that does not look like a credential's.
HEADERS_NAME = re.compile(r"OTEL_EXPORTER_OTLP(_[A-Z]+)?_HEADERS", re.IGNORECASE)


def in_environment(environ: Mapping[str, str]) -> set[str]:
    """The secrets ``environ`` holds (see the module docstring)."""
    found: set[str] = set()
    for name, value in list(environ.items()):
        if CREDENTIAL_NAME.search(name):
            found |= _credential_values(value)
        elif HEADERS_NAME.fullmatch(name):
            found |= _header_values(value)
        if "@" in value:  # (any variable: ``DATABASE_URL``, ``PIP_INDEX_URL``...)
            found |= _url_passwords(value)
    return {value for value in found if len(value) >= MIN_SECRET}


def _header_values(headers: str) -> set[str]:
    """The values of OTLP headers (``HEADERS_NAME``): each as written and decoded, and
    the credential after an authorization scheme (``Bearer``, ``Basic``...)."""
    found = {headers}
    for pair in headers.split(","):
        _, equals, value = pair.partition("=")
        if not equals:
            continue
        for written in {value.strip(), urllib.parse.unquote(value).strip()}:
            found |= _credential_values(written)
    return found


def _credential_values(value: str) -> set[str]:
    """A credential's value, and, when it is an authorization header's (``Bearer x``,
    ``Basic x``, ``Token x``: a scheme word, then the credential), the bare credential
    too: a tool or a client sends and prints the token without its scheme. A ``Basic``
    credential is ``user:password`` in base64: that text and the password as well."""
    found = {value}
    scheme, space, credential = value.strip().partition(" ")
    credential = credential.strip()
    if not (space and credential and scheme.isalpha()):
        return found
    found.add(credential)
    if scheme.lower() == "basic":
        with contextlib.suppress(ValueError):  # (binascii.Error, UnicodeDecodeError)
            pair = base64.b64decode(credential, validate=True).decode("utf-8")
            found |= {pair, pair.partition(":")[2]} if ":" in pair else set()
    return found


#: A URL's userinfo (``scheme://userinfo@``): up to the last ``@`` before its path, as
#: ``urllib.parse`` reads it (a password may hold an ``@`` a careless DSN left unescaped).
_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^\s/?#]*)@")


def _url_passwords(value: str) -> set[str]:
    """The passwords of the URLs in ``value`` (``postgres://user:pass@host/db``), as
    written and percent-decoded, and each such URL's whole userinfo (``user:pass``): a
    DSN holds its password under a name that does not look like a credential's. A short
    password (under ``MIN_SECRET``) is still hidden where the URL is shown: the userinfo
    around it is a secret of its own."""
    found = set()
    for match in _USERINFO.finditer(value):
        userinfo = match.group(1)
        _, colon, password = userinfo.partition(":")
        if colon and password:
            found |= {password, urllib.parse.unquote(password)}
            found |= {userinfo, urllib.parse.unquote(userinfo)}
    return found
