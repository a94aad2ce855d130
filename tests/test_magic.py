"""The %%cortex magic, driven through a real IPython shell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import cortex_jupyter
from cortex_jupyter.magic import CortexMagics

SCRIPT = """\
<thought>
I need the weather first, then a summary of it.
</thought>
<action type="tool" mode="async" id="w1">
{"name": "get_weather", "parameters": {"city": "Paris"}, "output_key": "weather"}
</action>
<action id='s1' mode='sync'>
{"name": "summarize", "parameters": {"text": "$weather"}, "depends_on": ["w1"]}
</action>
<response>
## Paris
It is **sunny**.
</response>
"""

LISTING = """\
thought
  I need the weather first, then a summary of it.
action w1: get_weather (type=tool, mode=async)
  parameters: {"city": "Paris"}
  output_key: "weather"
action s1: summarize (type=tool, mode=sync)
  parameters: {"text": "$weather"}
  depends_on: ["w1"]
response
  ## Paris
  It is **sunny**.
"""


def test_load_ext_registers_the_cell_magic(ip: InteractiveShell) -> None:
    assert "cortex" in ip.magics_manager.magics["cell"]
    # A Configurable the shell knows about, so `%config CortexMagics.<x>` can reach it.
    assert any(isinstance(c, CortexMagics) for c in ip.configurables)


def test_unload_ext_removes_the_cell_magic(ip: InteractiveShell) -> None:
    ip.run_line_magic("unload_ext", "cortex_jupyter")
    assert "cortex" not in ip.magics_manager.magics["cell"]
    assert not any(isinstance(c, CortexMagics) for c in ip.configurables)
    ip.run_line_magic("load_ext", "cortex_jupyter")
    assert "cortex" in ip.magics_manager.magics["cell"]


def test_load_ext_in_a_cell(_shell: InteractiveShell) -> None:
    result = _shell.run_cell("%load_ext cortex_jupyter")
    try:
        assert result.success
        assert "cortex" in _shell.magics_manager.magics["cell"]
    finally:
        _shell.run_line_magic("unload_ext", "cortex_jupyter")


def test_script_lists_thought_actions_and_response(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("cortex", "--script", SCRIPT)
    assert capsys.readouterr().out == LISTING


def test_script_stores_the_events(ip: InteractiveShell) -> None:
    ip.run_cell_magic("cortex", "--script", SCRIPT)
    events = ip.user_ns["_cortex_events"]
    actions = [e.action for e in events if e.kind == "action"]
    assert [(a.id, a.name) for a in actions] == [("w1", "get_weather"), ("s1", "summarize")]
    assert actions[1].depends_on == ("w1",)
    assert not [e for e in events if e.kind == "error"]


@pytest.mark.parametrize("chunk_size", [1, 2, 7, 10_000])
def test_listing_does_not_depend_on_chunk_size(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], chunk_size: int
) -> None:
    ip.run_cell_magic("cortex", f"--script --chunk-size {chunk_size}", SCRIPT)
    assert capsys.readouterr().out == LISTING


def test_auto_dialect_reads_cortex(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("cortex", "--script --dialect auto", SCRIPT)
    assert capsys.readouterr().out == LISTING


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        ("sigil", "§THINK: Say hello.\n§RESPOND: Hello!\n§END:\n"),
        ("cogency", "<think>Say hello.</think>\n<respond>Hello!</respond>"),
        ("cortex", "<thought>Say hello.</thought>\n<response>Hello!</response>"),
    ],
)
def test_dialects_list_the_same_way(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], dialect: str, body: str
) -> None:
    ip.run_cell_magic("cortex", f"--script --dialect {dialect}", body)
    assert capsys.readouterr().out == "thought\n  Say hello.\nresponse\n  Hello!\n"


def test_a_response_that_is_not_final_says_so(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    body = '<response final="false">Working on it.</response>\n<response>Done.</response>'
    ip.run_cell_magic("cortex", "--script --chunk-size 3", body)
    assert capsys.readouterr().out == (
        "response (not final)\n  Working on it.\nresponse\n  Done.\n"
    )


def test_script_lists_errors_with_their_code(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    body = (
        '<action id="x1">{"name": "broken", </action>\n'
        '<action id="x2" type="spell">{"name": "z"}</action>'
    )
    ip.run_cell_magic("cortex", "--script", body)
    out = capsys.readouterr().out
    assert "error invalid_json (action x1)\n  " in out
    assert "error unknown_type (action x2)\n  " in out
    assert [e.code for e in ip.user_ns["_cortex_events"] if e.kind == "error"] == [
        "invalid_json",
        "unknown_type",
    ]


def test_text_outside_blocks_is_listed(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("cortex", "--script", "Hello there.\n<response>Hi.</response>")
    assert capsys.readouterr().out == "text outside any block\n  Hello there.\nresponse\n  Hi.\n"


def test_blank_script_says_there_is_nothing(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    # IPython itself refuses an empty cell body; a blank one reaches the magic.
    ip.run_cell_magic("cortex", "--script", "\n  \n")
    assert capsys.readouterr().out == "(no thought, action, response or error in this text)\n"
    assert all(e.kind == "text" for e in ip.user_ns["_cortex_events"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--script --chunk-size 0", "--chunk-size must be a whole number of 1 or more, not '0'."),
        ("--script --chunk-size -3", "--chunk-size must be a whole number of 1 or more, not '-3'."),
        (
            "--script --chunk-size lots",
            "--chunk-size must be a whole number of 1 or more, not 'lots'.",
        ),
        (
            "--script --dialect klingon",
            "unknown dialect 'klingon'. Use one of: cortex, sigil, cogency, auto.",
        ),
        ("--script --bogus", "unrecognized arguments: --bogus. See `%%cortex?` for the options."),
    ],
)
def test_bad_options_are_usage_errors(ip: InteractiveShell, line: str, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("cortex", line, SCRIPT)
    assert str(raised.value) == f"%%cortex: {message}"
    assert "_cortex_events" not in ip.user_ns


def test_without_script_says_models_are_not_available_yet(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("cortex", "", "What is the weather in Paris?")
    assert str(raised.value) == (
        "Sending a cell to a model is not available yet in this version of cortex_jupyter. "
        "Use `%%cortex --script` to parse the cell body as if a model had written it."
    )


def test_usage_error_in_a_cell_shows_no_traceback(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = ip.run_cell("%%cortex --script --chunk-size 0\n<response>Hi.</response>\n")
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr().err
    assert "UsageError: %%cortex: --chunk-size must be a whole number" in err
    assert "Traceback" not in err


def test_package_reexports_the_parser() -> None:
    from cortex_jupyter.protocol import Parser

    assert cortex_jupyter.Parser is Parser
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        _ = cortex_jupyter.nothing_here  # type: ignore[attr-defined]


def test_readme_example_prints_what_the_readme_says(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    example = readme.split("## Example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```[a-z]*\n(.*?)```", example, flags=re.DOTALL)
    cell = next(block for block in blocks if block.startswith("%%cortex --script\n"))
    listing = blocks[blocks.index(cell) + 1]
    ip.run_cell_magic("cortex", "--script", cell.split("\n", 1)[1])
    assert capsys.readouterr().out == listing
