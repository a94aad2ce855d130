"""A typed answer (``%%cortex --output T``) through a real kernel: what the comm messages
carry while the object fills in, the checked object at the end, and the static copy."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from .harness import Execution, Kernel

CITY = "Saint-Remy-de-Provence, in the Bouches-du-Rhone"
WEATHER = {"city": CITY, "temp": 12, "tags": ["mild", "grey"], "wind": {"kmh": 7}}
DEFINE = """
from dataclasses import dataclass

@dataclass
class Wind:
    kmh: int

@dataclass
class Weather:
    city: str
    temp: int
    tags: list[str]
    wind: Wind
"""
CELL = (
    "%%cortex --script --chunk-size 4 --delay 0.02 --output Weather\n"
    "<response>Here is the weather:\n```json\n" + json.dumps(WEATHER) + "\n```</response>\n"
)
NOT_FITTING = (
    "%%cortex --script --chunk-size 8 --delay 0.01 --output Weather --output-retries 0\n"
    '<response>{"city": "<b>Lyon</b>", "temp": "warm"}</response>\n'
)


@pytest.fixture(scope="module")
def typed_kernel(kernel: Kernel) -> Iterator[Kernel]:
    kernel.execute(DEFINE)
    yield kernel


@pytest.fixture(scope="module")
def streamed(typed_kernel: Kernel) -> Execution:
    return typed_kernel.execute(CELL)


def test_the_object_fills_in_as_a_tree_over_the_wire(streamed: Execution) -> None:
    values = [value for _, value in streamed.part_values("cortex-output")]
    assert len(set(values)) >= 4, values  # drawn while it was written
    cut = [f"&#x27;{CITY[:n]}&#x27;" for n in range(1, len(CITY))]
    partial = [v for v in values if "<details" in v and "grey" not in v]
    assert partial, values  # an object with some of its fields
    assert any(any(c in v for c in cut) for v in values)  # the city while it was written
    for value in values:  # a tree after the text; never the JSON's characters
        assert "```" not in value and "&quot;city&quot;" not in value and '"city"' not in value
    final = values[-1]
    assert "Weather · the answer<" in final  # the checked object
    assert "&#x27;grey&#x27;" in final and "&#x27;kmh&#x27;" in final
    assert "Here is the weather:" in final
    response = " ".join(value for _, value in streamed.part_values("cortex-response"))
    assert "city" not in response  # the markdown never shows the JSON


def test_the_static_copy_shows_the_final_object(streamed: Execution, typed_kernel: Kernel) -> None:
    _shown, copy = streamed.of("display_data")
    html, text = copy.content["data"]["text/html"], copy.content["data"]["text/plain"]
    assert "cortex-typed" in html and "<details" in html and "&#x27;grey&#x27;" in html
    assert "```" not in html
    assert "Answer (Weather):" in text and json.dumps(WEATHER, indent=2) in text
    got = "__import__('dataclasses').asdict(_cortex.output) == " + repr(WEATHER)
    assert typed_kernel.evaluate(got) == "True"


def test_an_answer_that_does_not_fit_shows_its_errors_escaped(typed_kernel: Kernel) -> None:
    run = typed_kernel.execute(NOT_FITTING, allow_error=True)
    values = [value for _, value in run.part_values("cortex-output")]
    final = values[-1]
    assert "cortex-typed-errors" in final and "It does not fit Weather:" in final
    assert "temp" in final and "<b>Lyon" not in final and "&lt;b&gt;Lyon" in final
    _shown, copy = run.of("display_data")
    assert "It does not fit:" in copy.content["data"]["text/plain"]
    assert "the answer did not fit Weather: temp:" in str(run.reply.get("evalue"))
    assert typed_kernel.evaluate("_cortex.output") == "None"
