"""The property that guards every surface (issue 25, section 1): any secret, inside any
value, through everything cortex shows, saves or sends, at every limit, leaves no
6-character fragment of itself.

A secret is made of quotes, backslashes, unicode and spaces (8 to 200 characters); it
is set in the environment (``DB_PASSWORD``) or is a model client's key (``add``, as
the OpenAI client does). It sits in a string, a nested dict/list, an object with its
own ``__repr__``, a pandas ``DataFrame`` and ``Series``, numpy strings and object
arrays, and a long log repeating it. A fragment counts only when it does not occur in
what the same surfaces show with no secret at all (their HTML, CSS and JSON are not the
secret's).

Two tests: one through the real magic, the real openai SDK against the loopback server,
the live view's comm messages, the static copy, ``%cortex vars``, ``%cortex config``
and the inspector (few examples: each is a whole run); one through the bounded-text
functions every surface uses, at many limits (many examples, fast).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import textwrap
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import comm
import numpy as np
import pandas as pd
import pytest
from comm.base_comm import BaseComm
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from cortex_jupyter import default_registry
from cortex_jupyter.display import widget as widget_module
from cortex_jupyter.display.inspector import inspector_html
from cortex_jupyter.display.rich import rich_html
from cortex_jupyter.runtime.core.record.run import brief_json, summarize
from cortex_jupyter.runtime.core.trust.secrets import (
    REDACTED,
    Repr,
    head,
    redact,
    render_value,
    safe_repr,
    secrets,
    shorten,
    tail,
    truncate,
)
from cortex_jupyter.runtime.core.values.answer import value_text
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts

SIZE = 6

# Quotes, backslashes, percent and HTML specials, unicode letters and symbols, spaces
# and line breaks: every character an escaping changes, and plenty it does not.
_CHARS = st.one_of(
    st.sampled_from("\"'\\%&<>+/=?# \n\t"),
    st.characters(min_codepoint=0x21, max_codepoint=0x7E),
    st.characters(categories=("Ll", "Lu", "Lo", "Nd", "So", "Sm")),
)


def _distinct(text: str) -> bool:
    """A secret worth the name: not mostly one character, not mostly blank."""
    return len(set(text)) >= 4 and len(text.strip()) >= 8 and text == text.strip()


SECRET = st.text(_CHARS, min_size=8, max_size=200).filter(_distinct)
#: A model client's key travels in an HTTP header: printable ASCII, no spaces.
CLIENT_KEY = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=8, max_size=80)
SHAPES = ("str", "nested", "object", "frame", "series", "numpy", "log", "json")


class Holder:
    """An object whose own ``__repr__`` quotes the secret (and ``__str__`` too)."""

    def __init__(self, secret: str) -> None:
        self.secret = secret

    def __repr__(self) -> str:
        return f"Holder(secret={self.secret!r}, url={'https://x/?k=' + self.secret!r})"

    __str__ = __repr__


def shape(kind: str, secret: str) -> Any:
    """``secret`` inside a value of the given kind."""
    if kind == "str":
        return f"config: password={secret} end"
    if kind == "nested":
        return {"db": {"password": secret, "hosts": ["a", {"pw": [secret, 3]}]}}
    if kind == "object":
        return {"conn": Holder(secret)}
    if kind == "frame":
        return pd.DataFrame({"name": ["svc", "db"], "auth": [secret, "token=" + secret * 3]})
    if kind == "series":
        return pd.Series([secret, "x"], index=["k", secret + "!"], name="creds")
    if kind == "numpy":
        return [np.str_(secret), np.array([secret, "y"], dtype=object)]
    if kind == "log":
        return "\n".join(f"line {i}: using {secret}" for i in range(300))
    return json.dumps({"inner": json.dumps({"password": secret})})  # JSON inside JSON


def leaks(secret: str, shown: str, baseline: str) -> list[str]:
    """The ``SIZE``-character pieces of ``secret`` in ``shown`` that ``baseline`` (the
    same surfaces with no secret) does not hold."""
    pieces = {secret[i : i + SIZE] for i in range(len(secret) - SIZE + 1)}
    found = {shown[i : i + SIZE] for i in range(len(shown) - SIZE + 1)} & pieces
    return sorted(p for p in found if p not in baseline and p not in REDACTED)


@contextlib.contextmanager
def as_secret(secret: str, how: str) -> Iterator[None]:
    """``secret`` known as one: an environment value, or a model client's key."""
    with pytest.MonkeyPatch.context() as patch:
        if how == "env":
            patch.setenv("DB_PASSWORD", secret)
        else:
            patch.setattr(secrets, "_added", set(secrets._added))  # forgotten afterwards
            secrets.add(secret)
        yield


# ---- the bounded-text functions, at many limits -------------------------------------------

LIMITS = (6, 40, 160, 4000)


def surfaces(value: Any) -> str:
    """What every bounded-text function makes of ``value``, at every limit."""
    text = value if isinstance(value, str) else value_text(value)
    out = [
        summarize(value),
        value_text(value),
        value_text(value, "v", limit=50),
        safe_repr(value),
        render_value(value),
        brief_json(value),
        rich_html(value),
        redact(str(value) if not isinstance(value, pd.DataFrame | pd.Series) else ""),
    ]
    for limit in LIMITS:
        out += [
            head(text, limit),
            tail(text, limit),
            shorten(text, limit),
            truncate(text, limit),
            Repr(limit=limit, items=4).repr(value),
            value_text(value, limit=limit),
        ]
    return "\n".join(out)


_BASELINES: dict[str, str] = {}


def baseline(kind: str) -> str:
    """The surfaces of a value of ``kind`` holding no secret."""
    if kind not in _BASELINES:
        _BASELINES[kind] = surfaces(shape(kind, "PLACEHOLDER-VALUE"))
    return _BASELINES[kind]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(secret=SECRET, key=CLIENT_KEY, kind=st.sampled_from(SHAPES))
def test_no_bounded_text_keeps_a_fragment_of_a_secret(secret: str, key: str, kind: str) -> None:
    for value_secret, how in ((secret, "env"), (key, "client")):
        if not _distinct(value_secret):
            continue
        value = shape(kind, value_secret)
        with as_secret(value_secret, how):
            shown = surfaces(value)
        assert leaks(value_secret, shown, baseline(kind)) == [], (how, kind)


# ---- every surface of a real run ---------------------------------------------------------

_VALUE: list[Any] = [None]


@pytest.fixture
def tools() -> Iterator[None]:
    @default_registry.tool(name="give")
    def give() -> Any:
        """Hand back the value."""
        return _VALUE[0]

    @default_registry.tool(name="boom")
    def boom() -> str:
        """Fail, quoting the value."""
        raise ValueError(f"could not connect with {_VALUE[0]!r}")

    @default_registry.tool(name="noisy")
    def noisy() -> str:
        """Print the value and say it is done."""
        print(f"connecting with {_VALUE[0]}")
        return "ok"

    yield
    for name in ("give", "boom", "noisy"):
        default_registry.remove("tool", name)


class Quiet(list[Any]):
    """A list whose repr is short (hypothesis shows a failing example's fixtures)."""

    def __repr__(self) -> str:
        return f"<{len(self)} items>"


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every comm message the widgets send, as the JSON the kernel would send."""
    sent: list[str] = Quiet()

    class WireComm(BaseComm):  # type: ignore[misc]
        def publish_msg(self, msg_type: str, data: Any = None, *args: Any, **kw: Any) -> None:
            sent.append(json.dumps(data, ensure_ascii=False))
            sent.append(json.dumps(data))

    monkeypatch.setattr(comm, "create_comm", WireComm)
    return sent


@pytest.fixture
def views(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every live view a run opens (to select its nodes: the inspector)."""
    opened: list[Any] = Quiet()
    original = widget_module.WidgetView.__init__

    def init(self: Any, *args: Any, **kw: Any) -> None:
        original(self, *args, **kw)
        opened.append(self)

    monkeypatch.setattr(widget_module.WidgetView, "__init__", init)
    return opened


@dataclass
class Notebook:
    """Every surface of a run: the shell (with the tools registered), the fake server it
    asks, every comm message the widgets send (``wire``) and the live views it opens."""

    ip: InteractiveShell
    server: FakeOpenAIServer
    wire: list[str]
    views: list[Any]


@pytest.fixture
def notebook(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: None, wire: list[str], views: list[Any]
) -> Notebook:
    return Notebook(ip, server, wire, views)


PROTOCOL = (
    '<action id="g">{"name": "give", "output_key": "got"}</action>'
    '<action id="b">{"name": "boom"}</action>'
    '<action id="n">{"name": "noisy"}</action>'
    '<action id="e">{"name": "give", "parameters": {}, "depends_on": ["g"]}</action>'
)


def run_everything(notebook: Notebook) -> str:
    """One run with the value, and everything a person or the model could see of it."""
    ip, server, wire, views = notebook.ip, notebook.server, notebook.wire, notebook.views
    wire.clear()
    views.clear()
    server.requests.clear()
    server.script(
        *(
            Stream([*texts(text, 37), finish()])
            for text in (
                PROTOCOL,
                "<response>Here it is: $got and $holder.</response>",
                '<action id="g">{"name": "give"}</action>',
                "<response>Again: $got.</response>",
            )
        )
    )
    ip.user_ns["holder"] = _VALUE[0]
    ip.run_line_magic("cortex", "expose holder")
    ip.run_line_magic("config", "CortexMagics.display = 'widgets'")
    inspected: list[str] = []
    with capture_output() as captured:
        ip.run_cell_magic("cortex", "--model gpt-test", "Show me the config and $holder.")
        run = ip.user_ns["_cortex"]
        assert views, "the run opened no live view"
        for view in views:
            for node_id in ("g", "b", "n", "e", None):
                view.select(node_id)
                view.redraw()
            inspected += [
                inspector_html(view.state, node_id, record=run, live=False)
                for node_id in ("g", "b", "n", "e")
            ]
        ip.run_line_magic("cortex", "vars")
        ip.run_line_magic("cortex", "history")
        ip.run_cell_magic("cortex", "--model gpt-test --text", "again")  # the text view
        # (last: the server is sent the request fields, as the user asked)
        ip.run_line_magic("config", f"CortexMagics.request = {{'api_token': {_VALUE[1]!r}}}")
        ip.run_line_magic("cortex", "config")
    ip.run_line_magic("config", "CortexMagics.request = {}")
    outputs = [
        json.dumps(o.data, ensure_ascii=False) + json.dumps(o.metadata) for o in captured.outputs
    ]
    return "\n".join(
        [
            json.dumps([r.json for r in server.requests], ensure_ascii=False),
            json.dumps([r.json for r in server.requests]),
            run.to_jsonl(),
            run.answer,
            str([node.error for node in run.actions.values()]),
            *inspected,
            *outputs,
            captured.stdout,
            captured.stderr,
            *wire,
        ]
    )


def quiet_and_shown(notebook: Notebook, make: Callable[[str], Any], secret: str) -> tuple[str, str]:
    """Everything a run shows with the tools' value made from a placeholder (what shows
    anyway), then with it made from ``secret``, held in the environment for that run."""
    placeholder = "PLACEHOLDER-VALUE"
    _VALUE[:] = [make(placeholder), placeholder]
    quiet = run_everything(notebook)
    _VALUE[:] = [make(secret), secret]
    with as_secret(secret, "env"):
        return quiet, run_everything(notebook)


@settings(
    max_examples=10,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    # Each example is a whole run: shrinking one would take minutes.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
@given(secret=SECRET, kind=st.sampled_from(SHAPES))
@example(secret="pw\"with\\back'slash-ünï", kind="nested")
@example(secret="Ņ𨩞ġĿÖ𬻲jĭ8Ûý𑦬H𠺾됅Ķ", kind="frame")  # wide characters: pandas cut a cell
def test_no_surface_of_a_run_keeps_a_fragment_of_a_secret(
    notebook: Notebook, secret: str, kind: str
) -> None:
    quiet, shown = quiet_and_shown(notebook, lambda s: shape(kind, s), secret)
    found = leaks(secret, shown, quiet)
    where = [shown[max(0, shown.find(p) - 700) : shown.find(p) + 50] for p in found[:3]]
    assert found == [], (kind, where)
    assert os.environ.get("DB_PASSWORD") != secret  # set for the run only


# ---- forms beyond escaping: what a value becomes on its way to a surface ----------------


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


#: A value holding the secret in some form, and that form as it would show (the text
#: whose fragments must not reach a surface).
ENCODED: dict[str, tuple[Callable[[str], Any], Callable[[str], str]]] = {
    # ``bytes``: repr writes a non-ASCII character as ``\xc3\xa4``.
    "bytes": (lambda s: {"blob": s.encode()}, lambda s: repr(s.encode())[2:-1]),
    # A basic-auth header: the secret base64-encoded after ``user:`` (any alignment).
    "base64": (
        lambda s: "Authorization: Basic " + _b64("svc:" + s),
        lambda s: _b64("svc:" + s)[8:],
    ),  # (not the groups holding ``svc:``)
    "hex": (lambda s: {"digest": s.encode().hex()}, lambda s: s.encode().hex()),
    # The same text in the other Unicode normal form (macOS file names, copied text).
    "nfd": (lambda s: {"pw": unicodedata.normalize("NFD", s)}, lambda s: s),
    # pandas cuts a categorical cell (and a categorical index label) itself.
    "categorical": (
        lambda s: pd.DataFrame(
            {"auth": pd.Categorical([s * 3, "x"])}, index=pd.CategoricalIndex([s * 3, "y"])
        ),
        lambda s: s,
    ),
}


@pytest.mark.parametrize("kind", sorted(ENCODED))
def test_no_surface_keeps_a_fragment_of_a_secret_in_another_form(
    notebook: Notebook, kind: str
) -> None:
    secret = "pässwörd-Ünïcode-42-Zéro"
    make, form = ENCODED[kind]
    quiet, shown = quiet_and_shown(notebook, make, secret)
    shown = unicodedata.normalize("NFC", shown)  # a form in NFD is the secret too
    found = leaks(form(secret), shown, quiet) + leaks(secret, shown, quiet)
    where = [shown[max(0, shown.find(p) - 300) : shown.find(p) + 50] for p in found[:2]]
    assert found == [], (kind, where)


def config_shown(notebook: Notebook, variable: str, secret: str) -> tuple[str, str]:
    """The text view and the transcript of a cell whose tools print and return
    ``secret``, held in the environment variable ``variable`` while it runs."""
    ip, server = notebook.ip, notebook.server
    _VALUE[:] = [secret, "unused"]
    server.script(
        Stream([*texts(PROTOCOL, 37), finish()]),
        Stream([*texts("<response>ok</response>", 5), finish()]),
    )
    with pytest.MonkeyPatch.context() as patch, capture_output() as captured:
        patch.setenv(variable, secret)
        ip.run_cell_magic("cortex", "--model gpt-test --text", "Show me the config.")
        return captured.stdout, ip.user_ns["_cortex"].to_jsonl()


#: A key of many lines, as PEM keys are kept in the environment (``PRIVATE_KEY``).
PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n"
    "-----END PRIVATE KEY-----"
)


def test_a_secret_of_many_lines_leaves_no_line_of_itself(notebook: Notebook) -> None:
    """The text view writes what a tool printed line by line, each under its node's
    mark (``n | ...``): a secret holding line breaks never reads as one text there, nor
    once a renderer wraps or re-indents it."""
    shown = "".join(config_shown(notebook, "PRIVATE_KEY", PEM))
    lines = [line for line in PEM.splitlines() if len(line) >= 8]
    assert [line for line in lines if line in shown] == []


@pytest.mark.parametrize(
    "secret", ["hunter2\x1b[0m-secret-zz9", "undecodable-\udcff\udcfe-bytes-42"]
)
def test_a_secret_holding_control_characters_is_redacted_where_they_are_replaced(
    notebook: Notebook, secret: str
) -> None:
    """The text view and the SVG graph replace control characters and lone surrogates (an
    environment value of bytes that are not UTF-8) with U+FFFD before they cut a line:
    the secret as it reads then is one of its forms too."""
    stdout, _ = config_shown(notebook, "DB_PASSWORD", secret)
    replaced = "".join("\ufffd" if not c.isprintable() and c not in "\n\t" else c for c in secret)
    assert leaks(replaced, stdout, "") == []


def test_a_secret_in_the_response_is_redacted_before_markdown_renders_it(
    notebook: Notebook,
) -> None:
    """Markdown rewrites the text it renders (``*x*`` is ``<em>x</em>``, ``\\_`` is ``_``,
    ``&amp;`` is ``&``): a secret in the model's reply (model text is untrusted) is
    another text once rendered, in the live view and in the static copy."""
    ip, server = notebook.ip, notebook.server
    secret = "pa*ss*wo\\_rd&amp;-12345678"
    reply = f"<response>The key is {secret} there.</response>"
    server.script(Stream([*texts(reply, 7), finish()]))
    ip.run_line_magic("config", "CortexMagics.display = 'widgets'")
    with pytest.MonkeyPatch.context() as patch, capture_output() as captured:
        patch.setenv("DB_PASSWORD", secret)
        ip.run_cell_magic("cortex", "--model gpt-test", "What is the key?")
    shown = "\n".join([*notebook.wire, *(json.dumps(o.data) for o in captured.outputs)])
    assert leaks(secret.replace("\\", "").replace("&amp;", "&"), shown, "") == []


def test_a_passphrase_wrapped_onto_lines_is_redacted(notebook: Notebook) -> None:
    """A tool that wraps its text (``textwrap``, a report laid out for a terminal) puts a
    line break and an indent where a passphrase had a space: the words of the secret
    are the secret whatever whitespace stands between them."""
    secret = "correct horse battery staple 42"
    wrapped = textwrap.fill(
        f"the passphrase is {secret}, keep it", width=22, subsequent_indent="  "
    )
    assert secret not in wrapped
    placeholder = "PLACEHOLDER VALUE OF FOUR WORDS"
    _VALUE[:] = [textwrap.fill(f"the passphrase is {placeholder}, keep it", width=22), placeholder]
    quiet = run_everything(notebook)
    _VALUE[:] = [wrapped, secret]
    with as_secret(secret, "env"):
        shown = run_everything(notebook)
    flat = " ".join(shown.split())
    found = leaks(secret, flat, quiet)
    assert found == [], [flat[max(0, flat.find(p) - 200) : flat.find(p) + 40] for p in found[:2]]
