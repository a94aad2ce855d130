"""The ten typed prompts a 135M model can fill, each with its answer's type, and what a
typed run gets: tests/live/test_live_typed.py asserts on them with the live model, and
``bench/constrain_bench.py --tasks typed`` measures them per dialect."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class Weather(BaseModel):
    city: str
    temp_c: int


class Person(BaseModel):
    name: str
    age: int


#: Ten prompts a 135M model can fill, each with its answer's type.
PROMPTS: list[tuple[str, Any]] = [
    ("The report says it is 21 degrees in Paris. Give the city and its temperature.", Weather),
    ("It is 15 degrees in Tokyo today. Give the city and its temperature.", Weather),
    ("Anna is 34 years old. Give her name and age.", Person),
    ("Is this review positive or negative? 'I loved every minute of it.'",
     Literal["positive", "negative"]),
    ("What colour is a clear sky: red, green or blue?", Literal["red", "green", "blue"]),
    ("List the first five even numbers.", list[int]),
    ("What is 2 + 3?", int),
    ("Is water wet? Answer true or false.", bool),
    ("Name three fruits.", list[str]),
    ("How many legs do a cat and a bird have? Give each animal and its number of legs.",
     dict[str, int]),
]  # fmt: skip
#: A typed answer here is a few dozen tokens. One reply, no retry: what is measured is the
#: first answer (and on a loaded machine a reply's prompt alone can take a minute).
LIMITS: dict[str, Any] = {
    "max_tokens": 60,
    "max_turns": 1,
    "output_retries": 0,
    "temperature": 0.0,
}
