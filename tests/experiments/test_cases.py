"""Cases and datasets: what a user writes down, the files it is kept in, and a DataFrame
made into cases."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.experiments.results import Expectation, Verdict
from tests.experiments.files import written


class Contains(Expectation):
    """A tiny expectation for these tests (expect.py is written apart)."""

    kind = "test_contains"

    def __init__(self, text: str, name: str | None = None) -> None:
        self.text, self.name = text, name

    def check(self, run: Any) -> Verdict:
        return Verdict.of(self.text in run.answer, f"answer lacks {self.text!r}")

    def to_data(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text}

    @classmethod
    def from_data(cls, data: Any) -> Contains:
        return cls(data["text"])


class Checked(Expectation):
    """One that holds a function, so it cannot be saved."""

    kind = "test_checked"

    def __init__(self, check: Any) -> None:
        self.fn = check

    def to_data(self) -> dict[str, Any]:
        raise ValueError("check= holds a function, which a file cannot hold")


def data_of(dataset: Dataset) -> dict[str, Any]:
    return dataset.to_data()


# ---- a case ----------------------------------------------------------------------------------


def test_a_single_expectation_is_taken_as_a_list_of_one_and_kept_as_a_tuple() -> None:
    one = Contains("Paris")
    assert Case("Capital of France?", expect=one).expect == (one,)
    assert Case("Capital of France?", expect=[one, one]).expect == (one, one)
    assert Case("q").expect == () and Case("q").metadata == {} and Case("q").vars == {}


def test_an_item_of_expect_that_is_no_expectation_is_named_by_position_and_type() -> None:
    with pytest.raises(TypeError, match=r"expect\[1\] is a str \('Paris'\), not an expectation"):
        Case("Capital of France?", expect=[Contains("x"), "Paris"])
    with pytest.raises(TypeError, match="a case's expect is a list of expectations; got str"):
        Case("Capital of France?", expect="Paris")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prompt", "error", "message"),
    [("", ValueError, "prompt is empty"), ("  \n", ValueError, "prompt is empty"),
     (None, TypeError, "prompt is text; got NoneType"), (3, TypeError, "got int")],
)  # fmt: skip
def test_a_prompt_is_non_empty_text(prompt: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Case(prompt)


def test_vars_are_names_a_run_can_read_as_dollar_name() -> None:
    with pytest.raises(ValueError, match=r"read as \$name.*got 'two words'"):
        Case("Use $x", vars={"two words": 1})
    assert Case("Use $x", vars={"x": 1}).vars == {"x": 1}


def test_a_case_keeps_copies_of_its_metadata_and_vars() -> None:
    meta = {"level": "easy"}
    case = Case("q", metadata=meta)
    meta["level"] = "hard"
    assert case.metadata == {"level": "easy"}
    with pytest.raises(AttributeError):
        case.prompt = "other"  # type: ignore[misc]


def test_replace_makes_a_checked_copy() -> None:
    case = Case("q", name="a")
    assert case.replace(prompt="r") == Case("r", name="a")
    with pytest.raises(ValueError, match="prompt is empty"):
        case.replace(prompt="")


# ---- a dataset -----------------------------------------------------------------------------


def test_unnamed_cases_are_named_by_position_and_found_by_name() -> None:
    dataset = Dataset([Case("one"), Case("two", name="second"), Case("three")], name="demo")
    assert dataset.names == ["case-1", "second", "case-3"]
    assert dataset["second"].prompt == "two" and dataset[0].prompt == "one"
    assert [c.prompt for c in dataset] == ["one", "two", "three"] and len(dataset) == 3
    assert "case-3" in dataset and "case-2" not in dataset
    assert repr(dataset) == "Dataset('demo', 3 cases)"
    assert repr(Dataset([Case("x")])) == "Dataset(1 case)"
    with pytest.raises(KeyError, match=r"no case named 'nope'.*its cases: case-1, second, case-3"):
        dataset["nope"]


def test_a_duplicate_name_is_refused_naming_it_and_both_positions() -> None:
    with pytest.raises(ValueError, match=r"two cases are named 'a' \(cases 1 and 3\)"):
        Dataset([Case("x", name="a"), Case("y"), Case("z", name="a")])
    with pytest.raises(ValueError, match="named 'case-2'"):  # a given name meets a default one
        Dataset([Case("x", name="case-2"), Case("y")])


def test_with_expectations_adds_to_every_case() -> None:
    extra = Contains("!")
    own = Contains("a")
    dataset = Dataset([Case("x", expect=own), Case("y")]).with_expectations(extra)
    assert [c.expect for c in dataset] == [(own, extra), (extra,)]


# ---- files ---------------------------------------------------------------------------------

TRICKY = Dataset(
    [
        Case(
            "Quelle est la capitale de la France ? 🇫🇷\nAnswer in one word.\n",
            name="capitale",
            expect=[Contains("Paris"), Contains("París")],
            metadata={"level": "easy", "tags": ["geo", "fr"], "weight": 1.5},
            vars={"table": {"rows": [[1, "a"], [2, None]], "ok": True}, "n": -3},
        ),
        Case("  leading spaces, a tab\tand a trailing space ", name="spaces"),
        Case("Quotes \" and ' and a colon: here # not a comment\n\n  indented line"),
    ],
    name="tricky ✓",
)


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".jsonl"])
def test_a_dataset_round_trips_through_a_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"set{suffix}"
    TRICKY.save(path)
    again = Dataset.load(path)
    assert data_of(again) == data_of(TRICKY)
    assert [type(e) for c in again for e in c.expect] == [Contains, Contains]


def test_the_files_are_readable_by_a_person(tmp_path: Path) -> None:
    TRICKY.save(tmp_path / "set.yaml")
    text = (tmp_path / "set.yaml").read_text(encoding="utf-8")
    assert text.startswith("name: tricky ✓\ncases:\n- name: capitale\n  prompt: |\n")
    assert "    Answer in one word.\n" in text and "🇫🇷" in text
    TRICKY.save(tmp_path / "set.jsonl")
    lines = (tmp_path / "set.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"dataset": "tricky ✓"} and len(lines) == 4
    assert json.loads(lines[2]) == {"name": "spaces", "prompt": TRICKY["spaces"].prompt}


def test_a_hand_written_yaml_list_of_cases_loads_named_after_its_file(tmp_path: Path) -> None:
    path = written(
        tmp_path / "smoke.yaml",
        "- prompt: What is 2+2?\n  expect: [{kind: test_contains, text: '4'}]\n"
        "- {name: hi, prompt: Say hello}\n",
    )
    dataset = Dataset.load(path)
    assert dataset.name == "smoke" and dataset.names == ["case-1", "hi"]
    assert isinstance(dataset["case-1"].expect[0], Contains)


@pytest.mark.parametrize("suffix", [".yaml", ".jsonl"])
@pytest.mark.parametrize(
    ("case", "message"),
    [
        (Case("q", name="fn", expect=[Contains("a"), Checked(len)]),
         "case 'fn': expectation 2 \\(test_checked\\) cannot be saved: check= holds a function"),
        (Case("q", name="when", vars={"day": datetime.date(2024, 1, 1)}),
         "case 'when' cannot be saved: vars\\['day'\\] is a date, not plain data"),
        (Case("q", name="deep", metadata={"a": {"b": [float("nan")]}}),
         "case 'deep' cannot be saved: metadata\\['a'\\]\\['b'\\]\\[0\\] is nan"),
        (Case("q", name="keys", metadata={"a": {1: "x"}}),
         "case 'keys' cannot be saved: metadata\\['a'\\] has the key 1, not text"),
    ],
)  # fmt: skip
def test_a_case_that_cannot_be_saved_leaves_the_file_as_it_was(
    tmp_path: Path, suffix: str, case: Case, message: str
) -> None:
    path = tmp_path / f"set{suffix}"
    path.write_text("the old file\n", encoding="utf-8")
    os.chmod(path, 0o640)
    with pytest.raises(ValueError, match=message):
        Dataset([Case("fine"), case]).save(path)
    assert path.read_text(encoding="utf-8") == "the old file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp file left
    Dataset([Case("fine")]).save(path)
    assert os.stat(path).st_mode & 0o777 == 0o640  # replaced whole, its mode kept


def test_a_self_holding_value_cannot_be_saved(tmp_path: Path) -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match=r"vars\['x'\]\[0\] holds itself"):
        Dataset([Case("q", vars={"x": loop})]).save(tmp_path / "s.yaml")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"ends in \.yaml, \.yml or \.jsonl; got '\.csv'"):
        Dataset([Case("q")]).save(tmp_path / "set.csv")
    with pytest.raises(ValueError, match=r"got '\.json'"):
        Dataset.load(tmp_path / "set.json")


BAD_YAML = {
    "malformed": (
        "cases:\n- prompt: [unclosed\n- name: x\n",
        r"set\.yaml, line \d: not a dataset's YAML",
    ),
    "no prompt": (
        "cases:\n- name: a\n  prompt: fine\n- name: b\n",
        r"line 4: case \('b'\): it has no prompt",
    ),
    "unknown kind": (
        "cases:\n- name: a\n  prompt: q\n  expect: [{kind: telepathy}]\n",
        r"line 2: case \('a'\): expectation 1: no expectation of kind 'telepathy'; the kinds are",
    ),
    "duplicate": (
        "cases:\n- {name: a, prompt: x}\n- {name: a, prompt: y}\n",
        r"two cases are named 'a'",
    ),
    "unknown field": ("- prompt: q\n  expected: [x]\n", r"line 1: case: unknown field 'expected'"),
    "not a mapping": ("cases: 3\n", r"holds a list of cases under 'cases'"),
    "vars not names": ("- prompt: q\n  vars: {a b: 1}\n", r"line 1: case: .*read as \$name"),
    "a set in vars": ("- prompt: q\n  vars: {x: !!set {a: null}}\n", r"vars\['x'\] is a set"),
    "bad expectation data": (
        "- prompt: q\n  expect: [{kind: test_contains}]\n", r"line 1: case: expectation 1: 'text'"
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    "tag",
    ["!!python/object/apply:os.system ['touch {marker}']",
     "!!python/object/new:subprocess.check_output [['touch', '{marker}']]",
     "!!python/name:os.system"],
)  # fmt: skip
def test_a_yaml_file_with_python_tags_is_refused_not_executed(tmp_path: Path, tag: str) -> None:
    marker = tmp_path / "ran"
    path = written(tmp_path / "evil.yaml", f"- prompt: {tag.format(marker=marker)}\n")
    with pytest.raises(ValueError, match=r"evil\.yaml, line 1: not a dataset's YAML \(could not"):
        Dataset.load(path)
    assert not marker.exists()


def test_yaml_aliases_that_would_expand_enormously_are_refused(tmp_path: Path) -> None:
    # Loaded, they would be shared lists; but an experiment stores its dataset as JSON,
    # and a save writes the file out: each copy would write 8**9 values.
    lines = ["- prompt: bomb", "  vars:", "    l0: &l0 [x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):  # 8**9 leaves if walked naively
        lines.append(f"    l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 8)}]")
    path = written(tmp_path / "bomb.yaml", "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"bomb\.yaml: its aliases \(\*name\) repeat more than"):
        Dataset.load(path)


BAD_JSONL = {
    "not json": (
        '{"prompt": "a"}\n{"prompt": \n',
        r"set\.jsonl, line 2: not JSON \(Expecting value\)",
    ),
    "header late": (
        '{"prompt": "a"}\n{"dataset": "x"}\n',
        r"line 2: a \{\"dataset\": NAME\} line comes first",
    ),
    "no prompt": ('{"dataset": "x"}\n\n{"name": "b"}\n', r"line 3: case \('b'\): it has no prompt"),
    "a list": ("[1, 2]\n", r"line 1: a case is a mapping; got list"),
    "deep": ("[" * 100_000 + "]" * 100_000 + "\n", r"line 1: not JSON"),
    "empty prompt": ('{"prompt": ""}\n', r"line 1: case: a case's prompt is empty"),
}  # fmt: skip


BAD_FILES = {
    **{f"yaml: {name}": ("set.yaml", *bad) for name, bad in BAD_YAML.items()},
    **{f"jsonl: {name}": ("set.jsonl", *bad) for name, bad in BAD_JSONL.items()},
}


@pytest.mark.parametrize(("name", "text", "message"), BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_bad_file_is_one_line_naming_the_file_and_where(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = written(tmp_path / name, text)
    with pytest.raises(ValueError, match=message) as caught:
        Dataset.load(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_a_file_that_is_not_utf8_is_said_so(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    path.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"set\.jsonl: not UTF-8 text"):
        Dataset.load(path)


# ---- any dataset round-trips ---------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
_cases = st.builds(
    Case,
    prompt=_text.filter(str.strip),
    name=st.none() | _text.filter(str.strip),
    expect=st.lists(st.builds(Contains, _text), max_size=2),
    metadata=st.dictionaries(_text, _plain, max_size=3),
    vars=st.dictionaries(
        st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), _plain, max_size=2
    ),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cases=st.lists(_cases, max_size=4, unique_by=lambda c: c.name),
    name=st.none() | _text.filter(str.strip),
)
def test_any_dataset_round_trips_through_both_formats(
    tmp_path: Path, cases: list[Case], name: str | None
) -> None:
    try:
        dataset = Dataset(cases, name)
    except ValueError:  # a given name met a default one (case-N)
        return
    for suffix in (".yaml", ".jsonl"):
        path = tmp_path / f"any{suffix}"
        dataset.save(path)
        again = Dataset.load(path)
        expected = data_of(dataset) | ({} if name else {"name": "any"})
        assert data_of(again) == expected


# ---- from a DataFrame ----------------------------------------------------------------------


def test_a_dataframe_becomes_one_case_per_row_with_plain_values(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        {
            "question": ["Capital of France?", "Capital of Peru?"],
            "id": ["fr", "pe"],
            "level": [1, None],
            "answer": ["Paris", "Lima"],
            "country": ["France", "Peru"],
        }
    )
    dataset = Dataset.from_pandas(
        df, case_name="id", metadata=["level"], vars=["country"], name="capitals",
        expect=lambda row: [Contains(row["answer"])],
    )  # fmt: skip
    assert dataset.names == ["fr", "pe"] and dataset.name == "capitals"
    assert dataset["fr"].metadata == {"level": 1.0} and dataset["pe"].metadata == {"level": None}
    assert type(dataset["fr"].metadata["level"]) is float  # numpy's float64 made plain
    assert dataset["pe"].vars == {"country": "Peru"}
    assert [e.text for e in dataset["pe"].expect] == ["Lima"]  # type: ignore[attr-defined]
    dataset.save(tmp_path / "capitals.jsonl")  # plain data: it can be saved
    assert data_of(Dataset.load(tmp_path / "capitals.jsonl")) == data_of(dataset)


def test_a_missing_column_is_named_with_the_columns_there_are() -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"q": ["a"], "tag": ["x"]})
    with pytest.raises(
        ValueError, match="prompt: the DataFrame has no column 'question'; its columns are q, tag"
    ):
        Dataset.from_pandas(df)
    with pytest.raises(ValueError, match="metadata: the DataFrame has no column 'level'"):
        Dataset.from_pandas(df, prompt="q", metadata=["level"])


def test_an_empty_prompt_cell_names_its_row() -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"question": ["fine", None, "also"]}, index=["a", "b", "c"])
    with pytest.raises(
        ValueError, match=r"row 2 \(index 'b'\): the prompt column 'question' is empty"
    ):
        Dataset.from_pandas(df)


# ---- ScriptModel: a script for each prompt -----------------------------------------------


def script_for(prompt: str) -> str:
    """Each prompt's script: an llm action (with its reply section), then the answer."""
    return (
        '<action type="llm" id="s">{"name": "complete", "parameters": {"prompt": "x"}, '
        '"output_key": "sum"}</action>'
        f"\n--- next turn ---\n<response>{prompt.upper()} $sum</response>"
        f"\n--- reply to s ---\nsummary of {prompt}"
    )


@pytest.fixture
def registry() -> Any:
    from cortex_jupyter.runtime import Registry

    registry = Registry(builtins=False)
    registry.register(lambda prompt: prompt, name="complete", type="llm")
    return registry


@pytest.mark.anyio
async def test_a_function_script_answers_each_run_from_its_prompt(registry: Any) -> None:
    from cortex_jupyter.models import ScriptModel
    from cortex_jupyter.runtime import Agent

    model = ScriptModel(script_for)
    agent = Agent(model=model, registry=registry)
    first = await agent.run("cats")
    second = await agent.run("dogs")  # the first script was used up: the new prompt's is taken
    assert first.status == "completed" and first.answer == "CATS summary of cats"
    assert second.status == "completed" and second.answer == "DOGS summary of dogs"
    assert repr(model) == "ScriptModel(function=script_for, chunk_size=16, delay=0)"


@pytest.mark.anyio
async def test_a_mapping_script_looks_the_prompt_up_and_names_one_it_lacks() -> None:
    from cortex_jupyter.models import NoScriptForPrompt, ScriptModel
    from cortex_jupyter.runtime import Agent

    scripts = {"hi": "<response>hello</response>", "bye": ["<response>ciao</response>"]}
    model = ScriptModel(scripts)
    assert (await Agent(model=model).run("bye")).answer == "ciao"
    model.reset()
    assert (await Agent(model=model).run("hi")).answer == "hello"
    missing = await Agent(model=ScriptModel(scripts)).run("what is " + "very " * 30 + "long?")
    assert missing.status == "failed"
    assert "no entry for the prompt 'what is very very" in (missing.reason or "")
    assert "…': its mapping holds 2 prompts" in (missing.reason or "")
    with pytest.raises(NoScriptForPrompt, match="holds 2 prompts"):
        ScriptModel(scripts).fresh("nope")


@pytest.mark.anyio
async def test_fresh_models_run_at_once_without_sharing_a_turn(registry: Any) -> None:
    import anyio

    from cortex_jupyter.models import ScriptModel
    from cortex_jupyter.runtime import Agent

    shared = ScriptModel(script_for, chunk_size=3, delay=0.001)
    runs: dict[str, Any] = {}

    async def one(prompt: str) -> None:
        agent = Agent(model=shared.fresh(prompt), registry=registry)
        runs[prompt] = await agent.run(prompt)

    async with anyio.create_task_group() as group:
        for prompt in ("cats", "dogs", "owls"):
            group.start_soon(one, prompt)
    assert {p: r.answer for p, r in runs.items()} == {
        p: f"{p.upper()} summary of {p}" for p in ("cats", "dogs", "owls")
    }
    assert shared.turns_used == 0  # the shared model was never asked itself


def test_fresh_copies_a_fixed_script_at_turn_one() -> None:
    from cortex_jupyter.models import ScriptModel

    model = ScriptModel("one\n--- next turn ---\ntwo\n--- reply to a ---\nsub")
    model.turns_used = 2
    copy = model.fresh("anything")
    assert copy.turns == ("one", "two") and copy.turns_used == 0
    assert copy.replies == {"a": "sub"} and copy is not model
