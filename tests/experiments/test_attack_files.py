"""Hostile dataset files: what loading one may cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortex_jupyter.experiments.cases import Dataset
from tests.experiments.files import written


def _laughs(levels: int) -> str:
    lols = ", ".join(['"lol"'] * 9)
    lines = ["name: x", "cases:", "- prompt: hi", "  vars:", f"    a0: &a0 [{lols}]"]
    lines += [f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_file_is_refused_on_loading(tmp_path: Path) -> None:
    # 9**9 "lol"s from 1 KB: loaded, they are shared; run or saved, the experiment's
    # stored copy of the dataset would write every one of them (and the kernel dies).
    bomb = written(tmp_path / "laughs.yaml", _laughs(9))
    with pytest.raises(ValueError, match=r"laughs\.yaml.*alias"):
        Dataset.load(bomb)


def test_a_file_sharing_an_expectation_by_alias_still_loads(tmp_path: Path) -> None:
    shared = written(
        tmp_path / "shared.yaml",
        "cases:\n"
        "- {prompt: one, expect: &paris [{kind: answer, contains: Paris}]}\n"
        "- {prompt: two, expect: *paris}\n",
    )
    dataset = Dataset.load(shared)
    assert [len(case.expect) for case in dataset.cases] == [1, 1]


def test_a_catastrophic_regex_from_a_file_fails_its_try_instead_of_hanging(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from cortex_jupyter.experiments import expect as _expect
    from cortex_jupyter.experiments.cases import Dataset as _Dataset

    path = written(
        tmp_path / "redos.yaml",
        "name: redos\ncases:\n- name: a\n  prompt: say a\n  expect:\n"
        "  - {kind: answer, regex: '(x+x+)+y'}\n",
    )
    case = _Dataset.load(path)["a"]
    run = SimpleNamespace(answer="x" * 5000)  # (x+x+)+y backtracks for hours on it in re
    verdict = case.expect[0].check(run)
    assert not verdict.passed
    assert f"took over {_expect.REGEX_SECONDS:g} s" in verdict.reason
