"""Protocol-constrained decoding against a live model: runnable share per dialect.

Asks a live OpenAI-compatible server (by default a llama-server with SmolLM2-135M on
port 18102; see LIVE notes or ``python -m cortex_jupyter.local start``) ``n`` times per
dialect, with and without ``constrain``, to "use get_weather for CITY, then answer",
and prints one row per dialect and setting:

- runnable: the share of runs that wrote at least one ``get_weather`` action, where
  every action written ran (status ``done``) and no malformed action was reported;
- answered: the share of runs that ended ``completed`` with an answer that quotes the
  tool's temperature for that city;
- turns: mean model turns; latency: mean seconds per run.

    python bench/constrain_bench.py --base-url http://127.0.0.1:18102/v1 --n 10
    python bench/constrain_bench.py --later either   # later turns: actions or an answer

Output is not deterministic even at temperature 0: the figures vary from run to run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import anyio

from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.loop import grammar

#: What every run gets besides its model, dialect and ``constrain``.
LIMITS: dict[str, Any] = {"max_turns": 3, "max_tokens": 120, "temperature": 0.0}
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Perth", "Dakar", "Riga", "Hanoi"]


def temperature_of(city: str) -> int:
    return 10 + sum(map(ord, city)) % 20


def get_weather(city: str) -> dict[str, Any]:
    """The current weather in a city."""
    return {"city": city, "temp_c": temperature_of(city.strip().title()), "sky": "clear"}


def first_turn_actions(run: Run) -> list[Any]:
    return [node for node in run.actions.values() if node.parent is None]


def score(run: Run, city: str) -> tuple[bool, bool]:
    nodes = first_turn_actions(run)
    runnable = bool(nodes) and not run.errors and all(n.status == "done" for n in nodes)
    runnable = runnable and any(n.name == "get_weather" for n in nodes)
    answer = run.answer if isinstance(run.answer, str) else str(run.answer)
    answered = run.status == "completed" and str(temperature_of(city)) in answer
    return runnable, answered


async def one(model: OpenAIModel, dialect: str, constrain: bool, city: str) -> tuple[Run, float]:
    registry = Registry()
    registry.tool(get_weather)
    agent = Agent(model=model, registry=registry, dialect=dialect, constrain=constrain, **LIMITS)
    start = time.monotonic()
    run = await agent.run(f"Use get_weather for {city}, then answer: how warm is it there?")
    return run, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:18102/v1")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--dialects", default="cortex,hermes")
    parser.add_argument("--later", choices=("answer", "either"), default=grammar.LATER_STAGE)
    parser.add_argument("--only", choices=("both", "constrained", "unconstrained"), default="both")
    parser.add_argument("--show", action="store_true", help="Print each run's text.")
    args = parser.parse_args()
    grammar.LATER_STAGE = args.later
    model = OpenAIModel(
        args.model, base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "none")
    )
    settings = {"both": (True, False), "constrained": (True,), "unconstrained": (False,)}
    rows = []
    plan = [(c, d) for c in settings[args.only] for d in args.dialects.split(",")]
    for constrain, dialect in plan:  # constrained rows first: the goal's figures
        runnable = answered = 0
        turns, seconds, statuses = [], [], []
        for i in range(args.n):
            city = CITIES[i % len(CITIES)]
            run, took = anyio.run(one, model, dialect, constrain, city)
            ok, good = score(run, city)
            runnable += ok
            answered += good
            turns.append(run.turns)
            seconds.append(took)
            statuses.append(run.status)
            print(f"{dialect} constrain={constrain} {city}: {run.status}, runnable {ok}, "
                  f"answered {good}, {run.turns} turns, {took:.1f} s", flush=True)  # fmt: skip
            if args.show:
                print(f"--- {dialect} constrain={constrain} {city}: {run.status} {ok} {good}")
                print(run.text[:600])
                print("answer:", str(run.answer)[:200], "| reason:", run.reason)
        rows.append(
            (dialect, "constrained" if constrain else "unconstrained", runnable, answered,
             args.n, statistics.mean(turns), statistics.mean(seconds),
             ", ".join(f"{s} {statuses.count(s)}" for s in sorted(set(statuses))))
        )  # fmt: skip
        print(rows[-1], flush=True)
    print(f"\nmodel {args.model} at {args.base_url}; n={args.n}; later turns: {args.later}")
    print(f"{'dialect':8} {'setting':13} {'runnable':>9} {'answered':>9} {'turns':>6} "
          f"{'latency':>8}  statuses")  # fmt: skip
    for dialect, setting, ok, good, n, t, s, st in rows:
        line = f"{dialect:8} {setting:13} {ok:>5}/{n:<3} {good:>5}/{n:<3} {t:>6.1f} {s:>7.1f}s"
        print(f"{line}  {st}")


if __name__ == "__main__":
    main()
