"""The tasks ``evaluate()`` runs: ``Task`` (a prompt, its tools, a check, and for a typed
task the answer's type) and the built-in ones, small and deterministic, with answers a
regex or a function can check: ``TASKS`` (tool tasks) and ``TYPED_TASKS`` (typed answers)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from cortex_jupyter.runtime import Registry
from cortex_jupyter.runtime.core.errors import BadOutputType
from cortex_jupyter.runtime.core.values.typed import OutputType


@dataclass(frozen=True)
class Task:
    """One task: a ``prompt``, the ``tools`` it needs (functions, registered in a registry
    of the task's own; none for a task that needs none), and ``check``: a regex searched in
    the final answer's text (case-insensitive) or a function ``(answer) -> bool``.

    A typed task has an ``output_type`` (anything ``Agent(output_type=...)`` takes): its
    runs answer with an object of that type, and a function ``check`` is given that
    object (``run.output``), not the text. Its try is correct only if the answer fit."""

    prompt: str
    tools: Sequence[Callable[..., Any]]
    check: str | re.Pattern[str] | Callable[[Any], bool]
    name: str = ""
    output_type: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"a Task's prompt must be non-empty text; got {self.prompt!r}")
        tools = tuple(self.tools) if not callable(self.tools) else (self.tools,)
        for entry in tools:
            if not callable(entry):
                raise TypeError(f"a Task's tools must be functions; got {entry!r}")
        object.__setattr__(self, "tools", tools)
        check = self.check
        if isinstance(check, str):
            try:
                check = re.compile(check, re.IGNORECASE)
            except re.error as exc:
                raise ValueError(f"a Task's check {self.check!r} is not a regex: {exc}") from None
            object.__setattr__(self, "check", check)
        elif not isinstance(check, re.Pattern) and not callable(check):
            raise TypeError(f"a Task's check must be a regex or a function; got {check!r}")
        if not self.name:
            first = getattr(tools[0], "__name__", "task") if tools else "task"
            object.__setattr__(self, "name", first)
        if self.output_type is not None:
            try:  # the Agent's own rule for a usable type, said when the Task is made
                OutputType.of(self.output_type)
            except BadOutputType as exc:
                raise TypeError(f"a Task's output_type: {exc}") from None

    @property
    def typed(self) -> bool:
        """Whether the task's answer is typed (it has an ``output_type``)."""
        return self.output_type is not None

    def passes(self, answer: str, output: Any = None) -> bool:
        """Whether the answer is right: a regex is searched in the text ``answer``; a
        function is given ``answer``, or for a typed task the validated ``output``."""
        if isinstance(self.check, re.Pattern):
            return self.check.search(answer) is not None
        assert callable(self.check)
        return bool(self.check(output if self.typed else answer))

    def registry(self) -> Registry:
        """A registry of this task's tools alone (no built-in entries)."""
        registry = Registry(builtins=False)
        for func in self.tools:
            registry.register(func)
        return registry


def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


_CAPITALS = {"kenya": "Nairobi", "peru": "Lima", "mongolia": "Ulaanbaatar", "canada": "Ottawa"}
_POPULATIONS = {"lima": 10_092_000, "nairobi": 4_397_000, "ottawa": 1_017_000}


def capital(country: str) -> str:
    """The capital city of a country."""
    return _CAPITALS.get(country.strip().lower(), f"unknown country {country!r}")


def population(city: str) -> int:
    """The number of people living in a city."""
    found = _POPULATIONS.get(city.strip().lower())
    if found is None:
        raise ValueError(f"no population known for {city!r}")
    return found


def km_to_miles(km: float) -> float:
    """Convert kilometres to miles (rounded to 2 decimals)."""
    return round(km * 0.621371, 2)


def celsius_to_fahrenheit(celsius: float) -> float:
    """Convert degrees Celsius to degrees Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 1)


def count_letter(word: str, letter: str) -> int:
    """How many times a letter occurs in a word."""
    return word.lower().count(letter.lower())


def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"{city}: 13.4 °C, light rain"


def reverse_text(text: str) -> str:
    """The text written backwards."""
    return text[::-1]


def stock_price(symbol: str) -> float:
    """The latest price of a stock, in dollars."""
    return {"ACME": 187.25, "INITECH": 42.13}.get(symbol.strip().upper(), 1.0)


#: The built-in tasks: small, deterministic, checkable (two need two dependent steps).
TASKS: tuple[Task, ...] = (
    Task("Use the add tool to add 1234 and 5678, then tell me the sum.", [add], r"6,?912\b"),
    Task("Use the capital tool to find the capital of Kenya, then answer.", [capital], "nairobi"),
    Task(
        "Use km_to_miles to convert 42.195 km to miles, then give the result.",
        [km_to_miles],
        r"26\.22",
    ),
    Task(
        "Use count_letter to count how many times the letter r occurs in 'strawberry', "
        "then answer.",
        [count_letter],
        r"\b(3|three)\b",
    ),
    Task("Use get_weather for Oslo, then tell me the temperature.", [get_weather], r"13\.4"),
    Task(
        "Use celsius_to_fahrenheit to convert 37 degrees Celsius, then answer.",
        [celsius_to_fahrenheit],
        r"98\.6",
    ),
    Task("Use reverse_text to reverse the word 'cortex', then answer.", [reverse_text], "xetroc"),
    Task("Use stock_price to get the price of ACME, then answer.", [stock_price], r"187\.25"),
    Task(
        "Use multiply to compute 12 times 34, then add 56 to the result with add, and "
        "tell me the final number.",
        [multiply, add],
        r"\b464\b",
        name="multiply_then_add",
    ),
    Task(
        "Find the capital of Peru with the capital tool, then get that city's population "
        "with the population tool, and tell me the population.",
        [capital, population],
        r"10[,. ]?092[,. ]?000|10\.09",
        name="capital_then_population",
    ),
)


# --------------------------------------------------------------------------- typed tasks


class CityTemperature(BaseModel):
    """What the built-in ``extract_weather`` task answers with."""

    city: str
    temperature: float


def _lisbon_23(found: CityTemperature) -> bool:
    return found.city.strip().lower() == "lisbon" and found.temperature == 23


def _train_numbers(found: list[int]) -> bool:
    return found == [7, 3, 45]


#: The built-in typed tasks: no tools, an answer that is an object (a pydantic model; a
#: ``list[int]``), small enough for SmolLM2-135M. ``evaluate()`` runs them after ``TASKS``.
TYPED_TASKS: tuple[Task, ...] = (
    Task(
        "Which city and which temperature in degrees Celsius does this sentence give? "
        "'In Lisbon it was 23 degrees this afternoon, with a light breeze.'",
        [],
        _lisbon_23,
        name="extract_weather",
        output_type=CityTemperature,
    ),
    Task(
        "List the numbers this sentence mentions, in order: 'The train left at 7, "
        "stopped 3 times and arrived 45 minutes late.'",
        [],
        _train_numbers,
        name="list_numbers",
        output_type=list[int],
    ),
)
