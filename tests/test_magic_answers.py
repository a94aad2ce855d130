"""Issue 25, section 3: wrong results a user saw through the magic (continue, $name,
names the user assigns, odd objects, %cortex save), each checked through a real shell."""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Run, default_registry
from cortex_jupyter.display.markdown import render_markdown
from cortex_jupyter.session import CortexRunError
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts
from tests.odd_objects import notebook_only_objects, odd_objects

# ---- 3.1: what a cut reply left open is what its parser says ---------------------------

# (dialect, the cut reply (it quotes a tag), the continuation, the same reply uncut)
CUT_REPLIES = [
    (
        "cortex",
        "<response>Wrap reasoning in a <thought> tag and the answer in a response tag, like",
        "<response> this: done.</response>",
        "<response>Wrap reasoning in a <thought> tag and the answer in a response tag, "
        "like this: done.</response>",
    ),
    (
        "cogency",
        "<respond>Wrap reasoning in a <think> tag, like",
        "<respond> this: done.</respond><end>",
        "<respond>Wrap reasoning in a <think> tag, like this: done.</respond><end>",
    ),
    (
        "hermes",
        "In cortex the answer goes in <response>, like",
        "<think>Go on.</think> this: done.",
        "In cortex the answer goes in <response>, like<think>Go on.</think> this: done.",
    ),
    (
        "sigil",
        "§RESPOND: Wrap reasoning in a <thought> tag, like",
        "§RESPOND: this: done.§END:",
        "§RESPOND: Wrap reasoning in a <thought> tag, like this: done.§END:",
    ),
]


@pytest.mark.parametrize(
    ("dialect", "cut", "continuation", "whole"), CUT_REPLIES, ids=[c[0] for c in CUT_REPLIES]
)
def test_continuing_a_cut_reply_that_quotes_a_tag_adds_no_tag(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    dialect: str,
    cut: str,
    continuation: str,
    whole: str,
) -> None:
    server.script(
        Stream([*texts(whole, 7), finish()]),
        Stream([*texts(cut, 7), finish("length")]),
        Stream([*texts(continuation, 7), finish()]),
    )
    ip.run_cell_magic("cortex", f"--model m --dialect {dialect}", "Explain.")
    uncut = ip.user_ns["_cortex"]
    with pytest.raises(CortexRunError, match="token limit"):
        ip.run_cell_magic("cortex", f"--model m --dialect {dialect}", "Explain.")
    ip.run_line_magic("cortex", "continue")
    continued = ip.user_ns["_cortex"]
    assert continued.status == "completed"
    # The continued answer is the answer the reply gives uncut: no closing tag for a
    # block that the quoted tag never opened, and no re-opened tag.
    assert continued.answer == uncut.answer
    assert continued.response == uncut.response
    assert "like" in continued.answer and "done." in continued.answer
    assert continued.answer.count("<") == 1 and "§" not in continued.answer  # the quoted tag


# ---- 3.3: names first, whatever the later `$word` is -------------------------------------


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("A=$a B=$nope", "A=1 B=$nope"),
        ("A=$a B=$b", "A=1 B=2"),
        ("Totals: $a and **$b**", "Totals: 1 and **2**"),
        ("the $a$th and $x^2 + 1$ stay math", "the $a$th and $x^2 + 1$ stay math"),
        ("$a + 1 = $nope", "1 + 1 = $nope"),
    ],
)
def test_a_name_with_a_value_is_filled_before_a_later_word_makes_math(
    ip: InteractiveShell, response: str, answer: str
) -> None:
    ip.user_ns.update(a=1, b=2)
    ip.run_cell_magic("cortex", "--script", f"<response>{response}</response>")
    record = ip.user_ns["_cortex"]
    assert record.answer == answer
    # The view renders the same decision: the value is shown, no formula is made of it.
    html = render_markdown(response, {"a": 1, "b": 2})
    assert ("$a" in html) == ("$a" in answer)


# ---- 3.10: %cortex save takes a path as a person writes it ------------------------------


def _a_run(ip: InteractiveShell) -> None:
    ip.run_cell_magic("cortex", "--script", "<response>Saved.</response>")


def test_save_expands_the_home_folder_and_variables(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CORTEX_TEST_RUNS", str(tmp_path / "runs"))
    (tmp_path / "runs").mkdir()
    _a_run(ip)
    ip.run_line_magic("cortex", "save ~/x.jsonl")
    ip.run_line_magic("cortex", "save $CORTEX_TEST_RUNS/y.jsonl")
    for saved in (tmp_path / "x.jsonl", tmp_path / "runs" / "y.jsonl"):
        assert Run.load(saved).answer == "Saved."
    assert not (Path.cwd() / "~").exists()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("x" * 300 + ".jsonl", "File name too long"),  # is_dir() raised while explaining
        ("a\x00b.jsonl", "embedded null byte"),  # a ValueError, not an OSError
    ],
)
def test_save_to_a_path_no_system_takes_is_one_line(
    ip: InteractiveShell, tmp_path: Path, name: str, says: str
) -> None:
    _a_run(ip)
    with pytest.raises(UsageError, match=f"^%cortex save: cannot write .*{says}"):
        ip.run_line_magic("cortex", f"save {tmp_path / name}")
    ip.run_line_magic("cortex", f"save {tmp_path / 'fine.jsonl'}")  # the kernel goes on
    assert Run.load(tmp_path / "fine.jsonl").answer == "Saved."


# ---- 3.8: a name the user assigns is theirs, whatever the value -------------------------

#: What a cell may import as ``n``: the very object the run bound (small ints are shared).
SIX = 6


@pytest.fixture
def six() -> Iterator[None]:
    """A tool that answers 6: the run binds it as ``n``."""

    @default_registry.tool(name="answers_six")
    def answers_six() -> int:
        """Six."""
        return 6

    yield
    default_registry.remove("tool", "answers_six")


BIND_N = (
    '<action id="a">{"name": "answers_six", "output_key": "n"}</action>'
    "--- next turn ---\n<response>n is $n</response>"
)


def bind_n(ip: InteractiveShell, options: str = "") -> None:
    """A ``%%cortex`` run that binds ``n`` to the tool's 6."""
    ip.run_cell_magic("cortex", f"--script --delay 0 {options}".strip(), BIND_N)


def listed(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``%cortex vars`` lists."""
    ip.run_line_magic("cortex", "vars")
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "cell",
    [
        "n = 6",
        "n += 0",
        "for n in [6]:\n    pass",
        "(n := 6)",
        "[(n := 6) for _ in range(1)]",
        "n, m = 6, 7",
        "def f():\n    global n\n    n = 6\n\nf()",
        "from tests.test_magic_answers import SIX as n",
        "del n\nn = 6",
        "n: int = 6",
        "%time n = 6",
    ],
)
def test_a_name_the_user_assigns_is_theirs_even_with_the_same_value(
    ip: InteractiveShell, six: None, capsys: pytest.CaptureFixture[str], cell: str
) -> None:
    bind_n(ip)
    assert ip.user_ns["n"] == 6
    assert "(bound by cortex run" in listed(ip, capsys)

    ip.run_cell(cell)
    assert ip.user_ns["n"] is SIX  # the same object the run bound
    out = listed(ip, capsys)
    assert "n = 6  (yours: you assigned it after cortex run" in out
    assert "bound by cortex run" not in out

    # The next run may not take it back without --overwrite: it says so, and the name
    # stays the user's.
    bind_n(ip)
    assert any("'n' is yours: you assigned it" in note for note in ip.user_ns["_cortex"].notes)
    assert "n = 6  (yours: you assigned it" in listed(ip, capsys)
    bind_n(ip, "--overwrite")
    assert not ip.user_ns["_cortex"].notes
    assert "n = 6  (bound by cortex run" in listed(ip, capsys)


@pytest.mark.parametrize(
    "cell",
    [
        "print(n)",
        "m = n",
        "def g(n):\n    n = 7\n    return n",
        "[n for n in range(3)]",
        "class C:\n    n = 6",
        "f = lambda n: n",
    ],
)
def test_code_that_only_reads_the_name_or_binds_its_own_leaves_it_the_runs(
    ip: InteractiveShell, six: None, capsys: pytest.CaptureFixture[str], cell: str
) -> None:
    bind_n(ip)
    ip.run_cell(cell)
    ip.run_cell("%%cortex --script --delay 0\n" + BIND_N)  # the run's own binding, again
    assert not ip.user_ns["_cortex"].notes  # bound again, without --overwrite
    assert "n = 6  (bound by cortex run" in listed(ip, capsys)


# ---- 3.9: odd objects fail nothing but, at most, the action whose output they are -------

ODD = odd_objects()


def completed_in(ip: InteractiveShell, display: str, prompt: str) -> Any:
    """``%%cortex --model m`` on ``prompt`` in the ``display`` view (then back to
    'auto'): its run, which completed."""
    ip.run_line_magic("config", f"CortexMagics.display = {display!r}")
    try:
        ip.run_cell_magic("cortex", "--model m", prompt)
    finally:
        ip.run_line_magic("config", "CortexMagics.display = 'auto'")
    record = ip.user_ns["_cortex"]
    assert record.status == "completed", "".join(traceback.format_exception(record.error))
    return record


@pytest.fixture
def odd_tools() -> Iterator[dict[str, Any]]:
    """``odd_make`` returns the object named by ``kind``; ``odd_take`` takes any value."""
    made: dict[str, Any] = {}

    @default_registry.tool(name="odd_make")
    def odd_make(kind: str) -> Any:
        """An odd object."""
        return made.setdefault(kind, odd_objects()[kind])

    @default_registry.tool(name="odd_take")
    def odd_take(value: Any) -> str:
        """Takes anything."""
        return "taken"

    yield made
    default_registry.remove("tool", "odd_make")
    default_registry.remove("tool", "odd_take")


@pytest.mark.parametrize("display", ["text", "widgets"])
@pytest.mark.parametrize("kind", list(ODD))
def test_an_odd_object_passes_through_a_run_and_every_command_in_one_line(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    odd_tools: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    kind: str,
    display: str,
) -> None:
    ip.user_ns["odd_nb"] = odd_objects()[kind]  # the same kind, as a notebook variable
    server.script(
        Stream(
            [
                *texts(
                    '<action id="m">{"name": "odd_make", "parameters": {"kind": "KIND"}, '
                    '"output_key": "odd_out"}</action>'.replace("KIND", kind),
                    40,
                ),
                finish(),
            ]
        ),
        Stream(
            [
                *texts(
                    '<action id="t">{"name": "odd_take", "parameters": {"value": "$odd_out"}}'
                    '</action><action id="u">{"name": "odd_take", "parameters": '
                    '{"value": "$odd_nb"}}</action>',
                    40,
                ),
                finish(),
            ]
        ),
        Stream([*texts("<response>Made $odd_out from $odd_nb.</response>", 40), finish()]),
    )
    record = completed_in(ip, display, "Use $odd_nb.")
    assert {n.id: n.status for n in record.actions.values()} == {
        "m": "done",
        "t": "done",
        "u": "done",
    }
    assert ip.user_ns["odd_out"] is odd_tools[kind]
    assert record.answer.startswith("Made ") and "\n" not in record.answer
    # The model was sent a result for every action, each in a bounded text.
    assert len(server.requests) == 3

    text = record.to_jsonl()
    assert Run.from_jsonl(text).actions["m"].status == "done"
    capsys.readouterr()
    ip.run_line_magic("cortex", f"save {tmp_path / 'odd.jsonl'}")
    ip.run_line_magic("cortex", "expose odd_out odd_nb")
    ip.run_line_magic("cortex", "vars")
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert out.startswith("Saved the run's transcript to ")
    for name in ("odd_out", "odd_nb"):
        lines = [line for line in out.splitlines() if line.strip().startswith(f"{name} =")]
        assert len(lines) == 1 and len(lines[0]) < 200


def test_the_cell_reader_leaves_the_shell_with_the_extension(ip: InteractiveShell) -> None:
    from cortex_jupyter.session.names import Assignments

    ip.run_cell_magic("cortex", "--script --delay 0", "<response>ok</response>")
    assert sum(isinstance(t, Assignments) for t in ip.ast_transformers) == 1
    ip.run_line_magic("reload_ext", "cortex_jupyter")
    ip.run_cell_magic("cortex", "--script --delay 0", "<response>ok</response>")
    assert sum(isinstance(t, Assignments) for t in ip.ast_transformers) == 1
    ip.run_line_magic("unload_ext", "cortex_jupyter")
    assert not any(isinstance(t, Assignments) for t in ip.ast_transformers)
    ip.run_line_magic("load_ext", "cortex_jupyter")  # as the fixture expects to leave it


def test_replay_expands_the_home_folder_and_takes_a_quoted_path(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _a_run(ip)
    ip.run_line_magic("cortex", "save '~/my run.jsonl'")
    assert (tmp_path / "my run.jsonl").exists()
    ip.run_line_magic("cortex", "replay '~/my run.jsonl' 1000")
    assert ip.user_ns["_cortex"].answer == "Saved."
    ip.run_cell_magic("cortex", f'--replay "{tmp_path}/my run.jsonl" --speed 1000', "\n")
    assert ip.user_ns["_cortex"].answer == "Saved."


@pytest.mark.parametrize("display", ["text", "widgets"])
@pytest.mark.parametrize("kind", list(notebook_only_objects()))
def test_a_notebook_value_whose_class_raises_fails_no_run(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    display: str,
) -> None:
    # The cell names it, so the model is told about it; the answer fills it in.
    ip.user_ns["odd_nb"] = notebook_only_objects()[kind]
    server.script(
        Stream([*texts("<response>It is $odd_nb, not $odd_nb.x.</response>", 40), finish()])
    )
    record = completed_in(ip, display, "Describe $odd_nb.")
    assert record.answer.startswith("It is ") and "\n" not in record.answer
    sent = json.dumps(server.requests[0].json["messages"])
    assert "$odd_nb" in sent and "repr failed" in sent  # described, in so many words
    ip.run_line_magic("cortex", "expose odd_nb")
    capsys.readouterr()
    ip.run_line_magic("cortex", "vars")
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert len([line for line in out.splitlines() if "odd_nb =" in line]) == 1
