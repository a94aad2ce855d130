"""A secret the model writes split across stream chunks (issue 27, the store's joining):
every surface that keeps or shows the run's text (the saved transcript, the store's
files, the static copy, the widget's comm messages, the answer) holds no 6-character
fragment of it, wherever the chunks cut it, across two chunks and across three."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from cortex_jupyter.protocol.events import ResponseDelta
from cortex_jupyter.runtime import Run
from cortex_jupyter.runtime.core.trust.secrets import secrets
from cortex_jupyter.session.approvals import Approvals
from cortex_jupyter.session.views import TextOutput
from tests.display.helpers import comm_messages
from tests.helpers import run_and_save
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, text, texts

SIZE = 6
SECRET = "sk-SPLITsecret0123456789abcdefXYZ"  # 33 characters


def fragments(text: str) -> set[str]:
    return {text[i : i + SIZE] for i in range(len(text) - SIZE + 1)}


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return comm_messages(monkeypatch)


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keys added during the test are forgotten afterwards."""
    monkeypatch.setattr(secrets, "_added", set(secrets._added))
    yield


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pieces=st.sampled_from((2, 3)),
    cut=st.integers(min_value=1, max_value=len(SECRET) - 1),
    how=st.sampled_from(("env", "client")),
    display=st.sampled_from(("widgets", "text")),
)
def test_a_secret_split_across_chunks_is_on_no_surface(
    ip: InteractiveShell,
    wire: list[str],
    keyed: None,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    pieces: int,
    cut: int,
    how: str,
    display: str,
) -> None:
    # chunk size such that the secret spans ``pieces`` chunks, the first cut at ``cut``
    size = len(SECRET) if pieces == 2 else max(1, (len(SECRET) - cut + 1) // 2)
    lead = "<response>key: "
    pad = (size - (len(lead) % size) + (size - cut)) % size
    body = lead + "." * pad + SECRET + " done</response>"
    tmp = tmp_path_factory.mktemp("split")
    with monkeypatch.context() as patch:
        if how == "env":
            patch.setenv("DB_PASSWORD", SECRET)
        else:
            secrets.add(SECRET)
        ip.run_line_magic("config", f"CortexMagics.display = {display!r}")
        wire.clear()
        with capture_output() as captured:
            options = f"--script --delay 0 --chunk-size {size}"
            _, shown = run_and_save(ip, tmp, options, body)
        shown += [
            *(("output", json.dumps(o.data, ensure_ascii=False)) for o in captured.outputs),
            ("stdout", captured.stdout),
            ("stderr", captured.stderr),
            *(("comm", sent) for sent in wire),
        ]
    ip.run_line_magic("config", "CortexMagics.display = 'widgets'")
    found = sorted({name for name, text in shown for p in fragments(SECRET) if p in text})
    where = [t[:3000] for name, t in shown if name in found and name != "comm"][:1]
    assert found == [], (size, pad, where)


@pytest.mark.parametrize("cut", range(1, len(SECRET)))
def test_the_text_view_hides_a_secret_its_deliveries_split(
    cut: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text view writes each delivery of events redacted; the model's chunks may
    come in two deliveries, the secret cut between them."""
    monkeypatch.setenv("DB_PASSWORD", SECRET)
    out = TextOutput("m", Approvals(), Run())
    out.deliver([ResponseDelta("key: " + SECRET[:cut], final=False)])
    out.deliver([ResponseDelta(SECRET[cut:] + " done", final=False)])
    shown = capsys.readouterr().out
    assert "key: " in shown and " done" in shown
    assert sorted(p for p in fragments(SECRET) if p in shown) == []


@pytest.mark.parametrize("cut", [1, 5, 6, 16, len(SECRET) - 6, len(SECRET) - 1])
def test_a_secret_the_model_split_is_not_sent_back_to_it(
    ip: InteractiveShell, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, cut: int
) -> None:
    """The model's own reply goes back to it in the next request: redacted whole."""
    monkeypatch.setenv("DB_PASSWORD", SECRET)
    lead = "<thought>key: "
    first = lead + SECRET + ' ok</thought><action id="a">{"name": "nothing_here"}</action>'
    pieces = [first[: len(lead) + cut], first[len(lead) + cut :]]
    server.script(
        Stream([*(text(piece) for piece in pieces), finish()]),
        Stream([*texts("<response>Done.</response>", 9), finish()]),
    )
    ip.run_cell_magic("cortex", "--model fake-model --text", "Go.")
    assert len(server.requests) == 2
    sent = json.dumps([r.json for r in server.requests], ensure_ascii=False)
    assert "key: " in sent
    assert sorted(p for p in fragments(SECRET) if p in sent) == []
