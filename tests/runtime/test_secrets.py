"""``Secrets``: what is redacted, and that only exact values are."""

from __future__ import annotations

from typing import Any

import pytest

from cortex_jupyter.runtime.core.record.graph import ActionNode
from cortex_jupyter.runtime.core.trust.secrets import REDACTED, Repr, Secrets
from cortex_jupyter.runtime.integrations.mcp import server as mcp
from cortex_jupyter.runtime.loop.feeds import FeedSet, FeedSpec
from cortex_jupyter.runtime.scheduler import capture

ENV = {
    "OPENAI_API_KEY": "sk-proj-abcdefgh12345678",
    "GITHUB_TOKEN": "ghp_0123456789abcdef",
    "DB_PASSWORD": "hunter2hunter2",
    "SHORT_KEY": "none",  # a placeholder, not a secret
    "HOME": "/root",
    "MY_SECRET_NAME": "sk-proj-abcdefgh12345678-extended",
}


def test_credential_looking_environment_values_and_added_keys_are_redacted() -> None:
    secrets = Secrets(ENV)
    secrets.add("explicit-key-0000")
    text = (
        "key sk-proj-abcdefgh12345678, token ghp_0123456789abcdef, pw hunter2hunter2, "
        "ext sk-proj-abcdefgh12345678-extended, placeholder none, home /root, "
        "explicit explicit-key-0000, sklearn sk-learn"
    )
    assert secrets.redact(text) == (
        f"key {REDACTED}, token {REDACTED}, pw {REDACTED}, ext {REDACTED}, placeholder none, "
        f"home /root, explicit {REDACTED}, sklearn sk-learn"
    )


def test_values_are_read_afresh_so_a_key_set_later_is_covered() -> None:
    env: dict[str, str] = {}
    secrets = Secrets(env)
    assert secrets.redact("abc-very-secret-1") == "abc-very-secret-1"
    env["LATE_TOKEN"] = "abc-very-secret-1"
    assert secrets.redact("abc-very-secret-1") == REDACTED


def test_redact_value_walks_json_like_values_and_leaves_the_original_alone() -> None:
    secrets = Secrets(ENV)
    original = {"a": ["hunter2hunter2", 3, None], "hunter2hunter2": ("x", "hunter2hunter2")}
    assert secrets.redact_value(original) == {
        "a": [REDACTED, 3, None],
        REDACTED: ("x", REDACTED),
    }
    assert original["a"][0] == "hunter2hunter2"


# ---- redact before cutting ---------------------------------------------------------------

KEY = ENV["OPENAI_API_KEY"]
TOKEN = ENV["GITHUB_TOKEN"]


def parts_of_secrets(text: str) -> list[str]:
    """Every piece (four characters or more) of ``KEY`` or ``TOKEN`` that ``text`` holds."""
    return [
        secret[i : i + 4]
        for secret in (KEY, TOKEN)
        for i in range(len(secret) - 3)
        if secret[i : i + 4] in text
    ]


@pytest.mark.parametrize("secret", [KEY, TOKEN])
def test_no_cut_through_a_secret_leaves_a_part_of_it(secret: str) -> None:
    secrets = Secrets(ENV)
    text = "." * 30 + secret + "." * 30
    for limit in range(len(text)):  # every cut: before, through and after the secret
        for shortened in (
            secrets.head(text, limit),
            secrets.tail(text, limit),
            secrets.shorten(text, limit),
        ):
            assert parts_of_secrets(shortened) == [], (limit, shortened)
            assert len(shortened) <= limit


def test_a_text_that_fits_is_only_redacted() -> None:
    secrets = Secrets(ENV)
    assert secrets.shorten(f"key {KEY}", 100) == f"key {REDACTED}"
    assert secrets.head("short", 10) == "short" and secrets.tail("short", 10) == "short"
    assert secrets.shorten("." * 20, 10) == "." * 9 + "…"


def test_hide_edges_hides_what_a_cut_left_of_a_secret_at_either_end() -> None:
    secrets = Secrets(ENV)
    assert secrets.hide_edges("result: " + KEY[:9]) == f"result: {REDACTED}"
    assert secrets.hide_edges(TOKEN[-6:] + " and more") == f"{REDACTED} and more"
    # three characters are no secret's part worth hiding: "sk-" is a prefix of many words
    assert secrets.hide_edges("result: sk-") == "result: sk-"
    assert secrets.hide_edges("  sk-proj-x") == "  sk-proj-x"  # not how the key goes on


def test_repr_redacts_before_it_cuts_strings_containers_and_objects() -> None:
    secrets = Secrets(ENV)
    short = Repr(secrets)
    short.maxstring = short.maxother = 40

    class Config:
        def __repr__(self) -> str:
            return "Config(" + "." * 12 + KEY + "." * 40 + ")"

    for value in ("." * 12 + KEY + "." * 40, ["." * 12 + TOKEN + "." * 40], Config()):
        shown = short.repr(value)
        assert "..." in shown and parts_of_secrets(shown) == [], shown


def test_repr_hides_a_part_of_a_secret_its_cut_leaves() -> None:
    # A value whose text holds only a part of the key (cut before it got here): the
    # repr's cut lands next to that part, which is hidden too.
    secrets = Secrets(ENV)
    short = Repr(secrets)
    short.maxother = 30

    class Partial:
        def __repr__(self) -> str:
            return KEY[:13] + "." * 60 + KEY[-14:]  # reprlib keeps 13 and 14 of 30

    shown = short.repr(Partial())
    assert parts_of_secrets(shown) == [] and shown.count(REDACTED) == 2, shown


def test_a_value_changed_in_place_is_seen() -> None:
    env = {"APP_TOKEN": "first-value-0001"}
    secrets = Secrets(env)
    assert secrets.redact("first-value-0001") == REDACTED
    env["APP_TOKEN"] = "other-value-0002"
    assert secrets.redact("first-value-0001 other-value-0002") == f"first-value-0001 {REDACTED}"


# ---- every place that cuts ---------------------------------------------------------------------

#: A credential-looking environment value for the sites that read this process's secrets.
SITE_TOKEN = "tok-ZQXWVUTSRPONMLKJ-hgij"


@pytest.fixture
def site_token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SITE_TOKEN", SITE_TOKEN)
    return SITE_TOKEN


def edge_parts(text: str) -> list[str]:
    """What a cut can leave of ``SITE_TOKEN``: its first or last four characters or more."""
    return [
        part
        for size in range(4, len(SITE_TOKEN))
        for part in (SITE_TOKEN[:size], SITE_TOKEN[-size:])
        if part in text
    ]


def test_a_feed_cut_to_its_tokens_keeps_no_part_of_a_secret(site_token: str) -> None:
    feeds = FeedSet([FeedSpec("log", params={"text": "." * 6 + site_token}, max_tokens=3)])
    shown = feeds.text("log")  # cut at 12 characters: 6 of them the token's
    assert "[truncated" in shown and edge_parts(shown) == []


def test_captured_text_cut_at_its_limit_keeps_no_part_of_a_secret(
    site_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capture, "MAX_KEPT", 30)
    node = ActionNode(id="a", name="noisy")
    capture.Capture(node, lambda: None).write("stdout", "." * 20 + site_token)
    assert len(node.stdout) <= 30 and edge_parts(node.stdout) == []


def test_an_mcp_servers_long_stderr_line_keeps_no_part_of_a_secret(
    site_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp, "KEPT_LINE_CHARS", 30)
    lines = mcp._Lines()
    lines.feed(f"{'.' * 20}{site_token}\n")
    lines.add("." * 22 + site_token)
    assert len(lines.lines()) == 2 and edge_parts("\n".join(lines.lines())) == []


def test_a_value_filled_into_the_answer_and_cut_at_its_limit_keeps_no_part_of_a_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cortex_jupyter.runtime.core.values.answer import VALUE_LIMIT, value_text

    key = "sk-proj-CUTTHROUGHabcdefghijk"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    for left in (4, 9, len(key) - 2):  # the limit falls inside the key
        shown = value_text("." * (VALUE_LIMIT - left) + key + " tail", where="dump")
        assert key[:4] not in shown, left
        # cut with a marker, unless the text once redacted fits whole
        assert "more characters; the whole value is dump]" in shown or (
            len(shown) <= VALUE_LIMIT and shown.endswith(REDACTED + " tail")
        )


def test_a_cut_never_leaves_half_a_redaction_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    from cortex_jupyter.runtime.core.trust.secrets import head

    key = "sk-proj-MARKERCUTabcdefghij"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    text = "x" * 20 + key + " and more"
    for limit in range(24, 30):  # the cut falls inside "[redacted]"
        shown = head(text, limit)
        assert shown == "x" * 20, (limit, shown)
    assert head(text, 30) == "x" * 20 + REDACTED


# ---- every form of a secret (issue 25) ---------------------------------------------------

FORMED = "pw\"with\\back'slash/ü &<x>+%"


@pytest.mark.parametrize(
    "written",
    [
        lambda s: __import__("json").dumps({"p": s}),
        lambda s: __import__("json").dumps({"p": s}, ensure_ascii=False),
        lambda s: repr({"p": s}),
        lambda s: repr([s + "'"]),  # the other quote style
        lambda s: ascii(s),
        lambda s: "?p=" + __import__("urllib.parse").parse.quote(s, safe=""),
        lambda s: "?p=" + __import__("urllib.parse").parse.quote(s),
        lambda s: "?p=" + __import__("urllib.parse").parse.quote_plus(s),
        lambda s: __import__("html").escape(s),
        lambda s: __import__("json").dumps(__import__("json").dumps({"p": s})),  # JSON in JSON
        lambda s: repr(__import__("json").dumps(s)),
    ],
)
def test_a_secret_is_redacted_in_every_escaped_form(written: Any) -> None:
    secrets = Secrets({"DB_PASSWORD": FORMED})
    text = written(FORMED)
    assert FORMED not in text or "\\" not in FORMED  # the form is not the raw value
    shown = secrets.redact(text)
    assert REDACTED in shown and "pw" not in shown.replace(REDACTED, ""), shown


def test_a_cut_through_an_escaped_form_hides_its_edge() -> None:
    import json

    secrets = Secrets({"DB_PASSWORD": FORMED})
    text = "." * 20 + json.dumps(FORMED) + "." * 20
    for limit in range(21, 40):
        assert "pw" not in secrets.head(text, limit).replace(REDACTED, ""), limit
        assert "%" not in secrets.tail(text, limit).replace(REDACTED, "")[:3], limit


def test_a_part_of_a_secret_another_library_cut_is_hidden() -> None:
    secrets = Secrets(ENV)
    assert secrets.redact("auth  token=sk-proj-abcdefg...") == f"auth  token={REDACTED}..."
    assert secrets.redact("…12345678 end") == f"…{REDACTED} end"
    assert secrets.redact("sk-proj is a prefix...") == "sk-proj is a prefix..."  # not at a cut


def test_a_frame_is_shown_from_redacted_cells_labels_and_index() -> None:
    pd = pytest.importorskip("pandas")
    secrets = Secrets(ENV)
    index = pd.MultiIndex.from_tuples([("a", KEY), ("b", "x")], names=["k", TOKEN])
    frame = pd.DataFrame({KEY: ["x" * 60 + KEY, 1]}, index=index)
    shown = secrets.shown(frame)
    for text in (str(shown), shown._repr_html_()):
        assert parts_of_secrets(text) == [], text
    assert frame.iloc[0, 0].endswith(KEY)  # the frame itself is untouched
    big = pd.DataFrame({"v": [KEY] * 5000})  # only the rows pandas may show are read
    assert parts_of_secrets(str(secrets.shown(big))) == []
