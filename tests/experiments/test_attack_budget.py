"""Attacks on an experiment's budget: what it refuses and what it never lets pass."""

from __future__ import annotations

from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.runtime import Agent
from tests.models.fake_openai_server import Error, FakeOpenAIServer, Stream, finish, text, usage


def test_a_dollar_budget_on_a_model_of_unknown_price_spends_nothing(
    server: FakeOpenAIServer,
) -> None:
    server.script(*[Stream([text("Paris"), finish(), usage(1500, 20)]) for _ in range(10)])
    cases = Dataset([Case(f"q{i}", expect=[expect.answer(contains="Paris")]) for i in range(5)])
    model = OpenAIModel("fake-model", max_retries=0)
    experiment = cases.run({"m": Agent(model=model)}, budget=0.01, progress=False)
    assert len(server.requests) == 0
    assert {t.status for t in experiment.tries} == {"budget"}


def test_a_first_try_that_failed_does_not_open_the_budget_to_every_try_at_once(
    server: FakeOpenAIServer,
) -> None:
    server.script(
        Error(500, {"error": {"message": "boom"}}),
        *[Stream([text("Paris"), finish(), usage(1500, 20)]) for _ in range(10)],
    )
    cases = Dataset([Case(f"q{i}", expect=[expect.answer(contains="Paris")]) for i in range(6)])
    model = OpenAIModel("fake-model", max_retries=0)
    experiment = cases.run(
        {"m": Agent(model=model)}, budget="3500tok", concurrency=8, progress=False
    )
    assert sum(t.tokens for t in experiment.tries) <= 3500
