"""A second round of hostile input to ``%%cortex --compare`` (issue 35): what a model's
answers, a careless line or a page can do to the diff, the columns and ``keep``."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter.display.compare_diff import answer_diff, compare_diff, diff_text
from tests.conftest import SECRET
from tests.models.fake_openai_server import FakeOpenAIServer
from tests.test_magic_compare import answering, compare
from tests.test_magic_compare import servers as servers  # the fixture


def test_answers_that_share_only_their_spaces_are_replaced_whole_not_word_by_word() -> None:
    # Anchoring a match on every lone space made this diff cubic: 400 words took 7 s,
    # 1,500 words minutes, and the live diff redraws it at every frame of the stream.
    first, other = " ".join(["yes"] * 400), " ".join(["no"] * 400)
    d = answer_diff("b", first, other)
    assert d.ops == (("removed", first), ("added", other))
    assert diff_text(compare_diff([("a", None, first), ("b", None, other)])).endswith(
        f"  [-{first}-]{{+{other}+}}"
    )


def test_a_long_answer_with_one_word_changed_still_shows_only_that_word() -> None:
    words = [f"w{i} the" for i in range(700)]  # 1,400 words, "the" in every other
    first = " ".join(words)
    words[350] = "CHANGED the"
    d = answer_diff("b", first, " ".join(words))
    assert [op for op in d.ops if op[0] != "same"] == [("removed", "w350"), ("added", "CHANGED")]


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_quoted_list_of_columns_names_the_columns_not_the_quotes(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], quote: str
) -> None:
    # The shell habit --compare "a, b": IPython's option parser keeps the quotes, which
    # made columns '"ma' and 'mb"', models no server knows.
    answering(servers, "Paris.", "Lyon.")
    result = compare(ip, f"--compare {quote}ma, mb{quote}")
    assert list(result) == ["ma", "mb"]
    assert (result["ma"].answer, result["mb"].answer) == ("Paris.", "Lyon.")


def test_keeping_the_same_run_twice_adds_no_second_case(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], tmp_path: Path
) -> None:
    # A double click on the keep button, or the line run again, made a second, identical
    # case "(2)" of the same run: an experiment then counted that run twice.
    answering(servers, "Paris.", "Lyon.")
    result = compare(ip, "--compare ma,mb")
    path = tmp_path / "cases.yaml"
    ip.run_line_magic("cortex", f"keep ma --to {path}")
    ip.run_line_magic("cortex", "keep ma --to cases")
    kept = path.read_text(encoding="utf-8")
    for to in (str(path), "cases"):
        with pytest.raises(UsageError, match="already"):
            ip.run_line_magic("cortex", f"keep ma --to {to}")
    assert path.read_text(encoding="utf-8") == kept
    assert len(ip.user_ns["cases"]) == 1
    # Another column's run, with the same prompt, is a case of its own.
    ip.run_line_magic("cortex", "keep mb --to cases")
    assert [c.metadata["run"] for c in ip.user_ns["cases"]] == [
        result["ma"].run.id, result["mb"].run.id
    ]  # fmt: skip


def test_the_comparisons_repr_never_shows_a_column_named_like_a_secret(
    ip: InteractiveShell, servers: list[FakeOpenAIServer]
) -> None:
    # `_compare` evaluated in a cell is its repr, in the output the notebook saves; the
    # cell's metadata and static copy were redacted already.
    from cortex_jupyter.session import session_for

    b = servers[1]
    session_for(ip).endpoints[SECRET] = (b.url, SECRET)
    answering(servers, "Paris.", "Lyon.")
    try:
        result = compare(ip, f"--compare ma,{SECRET}")
    finally:
        session_for(ip).endpoints.pop(SECRET, None)
    assert result[SECRET].answer == "Lyon."
    assert SECRET not in repr(result) and "ma: completed" in repr(result)
    assert SECRET not in repr(result[SECRET]) and SECRET not in repr(list(result.values()))


def test_hooks_for_a_column_that_is_not_there_are_refused() -> None:
    # hooks={"A": ...} for column "a" ran the column without its hooks, and said nothing.
    from cortex_jupyter import Agent
    from cortex_jupyter.models import ScriptModel
    from cortex_jupyter.runtime import RunHooks

    seen: list[object] = []
    agent = Agent(model=ScriptModel("<response>x</response>", delay=0))
    with pytest.raises(ValueError, match="hooks name no column: A; the columns are a"):
        Agent.compare("q", {"a": agent}, hooks={"A": RunHooks(on_event=seen.append)})
    runs = Agent.compare("q", {"a": agent}, hooks={"a": RunHooks(on_event=seen.append)})
    assert runs["a"].answer == "x" and seen
