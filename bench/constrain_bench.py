"""Protocol-constrained decoding against a live model: runnable and right shares per dialect.

Asks a live OpenAI-compatible server (by default a llama-server with SmolLM2-135M on
port 18102; see LIVE notes or ``python -m cortex_jupyter.local start``) ``n`` times per
dialect and task, with and without ``constrain``, and prints one row per task, dialect
and setting. The tasks:

- ``weather``: "use get_weather for CITY, then answer" (one tool);
- ``two-step``: "use get_city to find where I am, then get_weather for that city, then
  answer" (``get_city`` takes no parameters; the second call needs the first one's
  result, so it can only come in a later turn);
- ``typed``: ten questions whose answer has a type (``Agent(output_type=T)``: a small
  pydantic model, a ``Literal``, ``list[int]``, ``bool``...; tests/live/test_live_typed.py
  asks the same ten), one reply each, no retry, no tools.

Per row:

- runnable: the share of runs that wrote at least one action in the first turn, where
  every action written there ran (status ``done``) and no malformed action was reported;
- steps: the share of runs where every tool the task needs ran with the right input
  (``get_weather`` for the right city);
- answered: the share of runs that ended ``completed`` with an answer that quotes the
  tool's temperature for that city;
- turns: mean model turns; latency: mean seconds per run.

A ``typed`` row says instead the share of valid objects: runs whose ``run.output`` is
the validated object (``n`` is at most 10: one run per question).

    python bench/constrain_bench.py --base-url http://127.0.0.1:18102/v1 --n 10
    python bench/constrain_bench.py --tasks two-step --only constrained
    python bench/constrain_bench.py --later answer   # later turns may only answer
    python bench/constrain_bench.py --tasks typed --dialects cortex,hermes,sigil,cogency

To compare with an older grammar, run this file with that version of the package first
on the path (``git archive COMMIT | tar -x -C /tmp/before`` and ``PYTHONPATH=/tmp/before``).
Output is not deterministic even at temperature 0: the figures vary from run to run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.loop import grammar
from tests.live import typed_prompts

#: What every run gets besides its model, dialect and ``constrain``.
LIMITS: dict[str, Any] = {"max_turns": 4, "max_tokens": 120, "temperature": 0.0}
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Perth", "Dakar", "Riga", "Hanoi"]
TASKS = ("weather", "two-step", "typed")
PROMPTS = {
    "weather": "Use get_weather for {city}, then answer: how warm is it there?",
    "two-step": "Use get_city to find where I am, then use get_weather for that city, "
    "then answer: how warm is it where I am?",
}


#: The ``typed`` task: the live typed test's ten questions and their answers' types, and
#: what a typed run gets (one reply, no retry: the first answer is what is measured).
TYPED, TYPED_LIMITS = typed_prompts.PROMPTS, typed_prompts.LIMITS


def temperature_of(city: str) -> int:
    return 10 + sum(map(ord, city)) % 20


def get_weather(city: str) -> dict[str, Any]:
    """The current weather in a city."""
    return {"city": city, "temp_c": temperature_of(city.strip().title()), "sky": "clear"}


def registry_for(task: str, city: str) -> Registry:
    registry = Registry()
    registry.tool(get_weather)
    if task == "two-step":

        def get_city() -> str:
            """The city the user is in."""
            return city

        registry.tool(get_city)
    return registry


def first_turn_actions(run: Run) -> list[Any]:
    """The actions the first reply wrote (what the first turn's grammar shaped)."""
    ids, turn = set(), 0
    for event in run.events:
        if event.kind == "turn":
            turn = event.number
        elif event.kind == "action" and turn == 1:
            ids.add(event.action.id)
    return [node for id, node in run.actions.items() if id in ids]


def score(run: Run, task: str, city: str) -> tuple[bool, bool, bool]:
    """(runnable, steps, answered) of one run (see the module docstring)."""
    first = first_turn_actions(run)
    nodes = [node for node in run.actions.values() if node.parent is None]
    runnable = bool(first) and not run.errors and all(n.status == "done" for n in first)
    done = [n for n in nodes if n.status == "done"]
    weather = any(
        n.name == "get_weather" and str((n.resolved or {}).get("city", "")).strip().title() == city
        for n in done
    )
    steps = weather and (task != "two-step" or any(n.name == "get_city" for n in done))
    answer = run.answer if isinstance(run.answer, str) else str(run.answer)
    answered = run.status == "completed" and str(temperature_of(city)) in answer
    return runnable, steps, answered


async def one(
    model: OpenAIModel, task: str, dialect: str, constrain: bool, i: int
) -> tuple[Run, float]:
    city = CITIES[i % len(CITIES)]
    if task == "typed":
        prompt, kind = TYPED[i % len(TYPED)]
        options: dict[str, Any] = {"registry": Registry(builtins=False), "output_type": kind}
        options.update(TYPED_LIMITS)
    else:
        prompt = PROMPTS[task].format(city=city)
        options = {"registry": registry_for(task, city), **LIMITS}
    agent = Agent(model=model, dialect=dialect, constrain=constrain, **options)
    start = time.monotonic()
    run = await agent.run(prompt)
    return run, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:18102/v1")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--dialects", default="cortex,hermes")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--later", choices=("answer", "either"), default=grammar.LATER_STAGE)
    parser.add_argument("--only", choices=("both", "constrained", "unconstrained"), default="both")
    parser.add_argument("--show", action="store_true", help="Print each run's text.")
    args = parser.parse_args()
    grammar.LATER_STAGE = args.later
    model = OpenAIModel(
        args.model, base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "none")
    )
    settings = {"both": (True, False), "constrained": (True,), "unconstrained": (False,)}
    plan = [
        (task, constrain, dialect)
        for task in args.tasks.split(",")
        for constrain in settings[args.only]  # constrained rows first: the goal's figures
        for dialect in args.dialects.split(",")
    ]
    rows = [row(model, args, *step) for step in plan]
    print(f"\nmodel {args.model} at {args.base_url}; n={args.n}; later turns: {args.later}; "
          f"package {grammar.__file__}")  # fmt: skip
    print(f"{'task':9} {'dialect':8} {'setting':13} {'runnable':>9} {'steps':>7} "
          f"{'answered':>9} {'turns':>6} {'latency':>8}  statuses")  # fmt: skip
    for task, dialect, setting, ok, steps, good, n, t, s, st in rows:
        line = (f"{task:9} {dialect:8} {setting:13} {ok:>5}/{n:<3} {steps:>3}/{n:<3} "
                f"{good:>5}/{n:<3} {t:>6.1f} {s:>7.1f}s")  # fmt: skip
        print(f"{line}  {st}")


def row(model: OpenAIModel, args: Any, task: str, constrain: bool, dialect: str) -> tuple[Any, ...]:
    runnable = steps = answered = 0
    turns, seconds, statuses = [], [], []
    for i in range(min(args.n, len(TYPED)) if task == "typed" else args.n):
        city = CITIES[i % len(CITIES)]
        run, took = anyio.run(one, model, task, dialect, constrain, i)
        if task == "typed":  # valid objects, in all three columns
            ok = both = good = run.output is not None
        else:
            ok, both, good = score(run, task, city)
        runnable, steps, answered = runnable + ok, steps + both, answered + good
        turns.append(run.turns)
        seconds.append(took)
        statuses.append(run.status)
        print(f"{task} {dialect} constrain={constrain} {city}: {run.status}, runnable {ok}, "
              f"steps {both}, answered {good}, {run.turns} turns, {took:.1f} s")  # fmt: skip
        if args.show:
            print(run.text[:800])
            print("answer:", str(run.answer)[:200], "| reason:", run.reason)
    return (
        task, dialect, "constrained" if constrain else "unconstrained", runnable, steps,
        answered, len(turns), statistics.mean(turns), statistics.mean(seconds),
        ", ".join(f"{s} {statuses.count(s)}" for s in sorted(set(statuses))),
    )  # fmt: skip


if __name__ == "__main__":
    main()
