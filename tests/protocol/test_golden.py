"""The golden protocol cases in ``cases/``: each input must give exactly its events."""

from __future__ import annotations

import pytest

from cortex_jupyter.protocol import ERROR_CODES

from .golden import Case, load_cases, parse_chunks, split_every

CASES = load_cases()


def ids(case: Case) -> str:
    return case.name


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_case_whole(case: Case) -> None:
    assert parse_chunks(case, [case.text]) == case.expected, case.description


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_case_one_character_at_a_time(case: Case) -> None:
    assert parse_chunks(case, split_every(case.text, 1)) == case.expected, case.description


@pytest.mark.parametrize("case", [c for c in CASES if len(c.text) <= 700], ids=ids)
def test_case_split_in_two_anywhere(case: Case) -> None:
    for cut in range(1, len(case.text)):
        chunks = [case.text[:cut], case.text[cut:]]
        assert parse_chunks(case, chunks) == case.expected, f"split at {cut}: {case.description}"


def test_the_cases_cover_every_error_code_and_dialect() -> None:
    assert len(CASES) >= 40
    seen_codes = {e["code"] for case in CASES for e in case.expected if e["kind"] == "error"}
    assert seen_codes == set(ERROR_CODES)
    assert {case.dialect for case in CASES} == {"cortex", "sigil", "cogency", "hermes", "auto"}


def test_every_error_in_the_cases_carries_the_text_the_model_wrote() -> None:
    for case in CASES:
        for event in case.expected:
            if event["kind"] == "error":
                assert event.get("source"), f"{case.name}: {event['code']} has no source"


def test_every_case_describes_itself() -> None:
    for case in CASES:
        assert case.description, f"{case.name} has no description line"
        assert case.expected or not case.text, f"{case.name} expects no events"
