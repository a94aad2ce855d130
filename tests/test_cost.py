"""What a run costs, and budgets, through ``%%cortex`` cells against the loopback server.

The fake OpenAI-compatible server (tests/models) reports token usage in its last chunk,
as OpenAI does when asked; the run's cost is compared with genai-prices' own
calculation of the same usage, and a budget's stop is seen from the server's side: the
request it refuses never arrives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Agent, open_run, runs, store
from cortex_jupyter.display.state import from_run
from cortex_jupyter.display.static import header_html
from cortex_jupyter.display.theme import fmt_count
from cortex_jupyter.magic import CortexMagics
from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.runtime import Run
from cortex_jupyter.runtime.core.events import Chunk, Cost
from cortex_jupyter.runtime.core.model.chunks import Usage
from cortex_jupyter.runtime.core.record.run import decode_event
from cortex_jupyter.runtime.loop.context import DEFAULT_REPLY_ROOM, MESSAGE_OVERHEAD
from cortex_jupyter.session import CortexRunError, session_for
from cortex_jupyter.session.cell import LOCAL_KEY
from tests.conftest import SECRET
from tests.helpers import genai_price, recording_tool, registered_agent
from tests.models.fake_openai_server import (
    FakeOpenAIServer,
    Stream,
    finish,
    openai_usage,
    text,
    texts,
    usage,
)


def reply(text: str, prompt: int, completion: int) -> Stream:
    """A reply whose last chunk reports ``prompt`` and ``completion`` tokens."""
    return Stream([*texts(text, 9), finish(), usage(prompt, completion)])


def price(prompt: int, completion: int, model: str, **where: Any) -> float:
    """genai-prices' own price of that usage."""
    return genai_price(model, prompt, completion, **where)


def run(ip: InteractiveShell, line: str, body: str = "Go.") -> Any:
    ip.run_cell_magic("cortex", f"--text {line}", body)
    return ip.user_ns["_cortex"]


def last_line(out: str, start: str) -> str:
    return [line for line in out.splitlines() if line.startswith(start)][-1]


@pytest.fixture
def magics(ip: InteractiveShell) -> Iterator[CortexMagics]:
    found = ip.magics_manager.registry[CortexMagics.__name__]
    assert isinstance(found, CortexMagics)
    yield found
    ip.config.CortexMagics.clear()


@pytest.fixture
def tool() -> Iterator[list[Any]]:
    with recording_tool("cost_fetch", "fetched {}") as calls:
        yield calls


ACTION = '<action id="f1" mode="sync">{"name": "cost_fetch", "parameters": {"value": "x"}, "output_key": "got"}</action>'  # noqa: E501


# ---- cost ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4o"])
def test_a_runs_cost_is_genai_prices_price_of_each_request_summed(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    tool: list[str],
    capsys: pytest.CaptureFixture[str],
    model: str,
) -> None:
    # The server is on 127.0.0.1: a proxy may stand there for a paid model, so the model
    # is priced by its name, never taken as free for its address.
    server.script(reply(ACTION, 1200, 80), reply("<response>Done.</response>", 1500, 20))
    record = run(ip, f"--model {model}")
    assert record.status == "completed"
    expected = price(1200, 80, model) + price(1500, 20, model)
    assert expected > 0
    assert record.cost == pytest.approx(expected)
    assert [c.usd for c in record.costs] == [
        pytest.approx(price(1200, 80, model)),
        pytest.approx(price(1500, 20, model)),
    ]
    assert "genai-prices" in record.cost_note and "the prices of 20" in record.cost_note
    shown = f"${expected:.2g}" if expected < 0.001 else f"${expected:.4f}".rstrip("0")
    assert shown in last_line(capsys.readouterr().out, "[end]")
    assert shown in header_html(from_run(record, model))  # the static copy's header


def test_a_model_with_no_known_price_costs_none_and_is_shown_unknown_never_0(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(reply("<response>Hi.</response>", 500, 10))
    record = run(ip, "--model my-private-finetune-7")
    assert record.cost is None
    assert "no price is known for the model 'my-private-finetune-7'" in record.cost_note
    end = last_line(capsys.readouterr().out, "[end]")
    assert "cost unknown" in end and "$0" not in end
    assert "cost unknown" in header_html(from_run(record, "my-private-finetune-7"))


def test_the_runs_table_shows_an_unknown_cost_as_unknown_and_a_known_one_in_dollars(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(
        reply("<response>Hi zeppelinunknown.</response>", 500, 10),
        reply("<response>Hi zeppelinknown.</response>", 1200, 80),
    )
    unknown = run(ip, "--model my-private-finetune-7", "zeppelinunknown?")
    known = run(ip, "--model gpt-4o-mini", "zeppelinknown?")
    store.open_store().flush()
    capsys.readouterr()
    ip.run_line_magic("cortex", "runs zeppelinunknown")
    table = capsys.readouterr().out.splitlines()
    row = next(line for line in table if line.startswith(unknown.id))
    assert table[0].split()[7] == "cost" and row.split()[8] == "unknown", table  # (when: 2 words)
    assert "$0" not in row
    ip.run_line_magic("cortex", "runs zeppelinknown")
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(known.id))
    assert row.split()[8] == f"${price(1200, 80, 'gpt-4o-mini'):.4g}"


def test_a_model_named_with_its_provider_is_priced_at_that_provider_behind_a_proxy(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # "openai/gpt-4o-mini" at 127.0.0.1 (a LiteLLM-style proxy): the name says the provider.
    server.script(reply("<response>Hi.</response>", 1200, 80))
    record = run(ip, "--model openai/gpt-4o-mini")
    assert record.cost == pytest.approx(price(1200, 80, "gpt-4o-mini", provider_id="openai"))
    server.script(reply("<response>Hi.</response>", 1200, 80))
    assert run(ip, "--model nobody/gpt-4o-mini").cost is None  # an unknown provider: unknown


def test_a_server_that_reports_no_usage_leaves_the_cost_unknown(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.script(Stream([*texts("<response>Hi.</response>", 9), finish()]))
    record = run(ip, "--model gpt-4o-mini")
    assert record.cost is None
    assert "reported no token usage" in record.cost_note


def test_one_unpriced_request_makes_the_whole_run_unknown(
    ip: InteractiveShell, server: FakeOpenAIServer, tool: list[str]
) -> None:
    server.script(
        reply(ACTION, 1000, 10), Stream([*texts("<response>Done.</response>", 9), finish()])
    )
    record = run(ip, "--model gpt-4o-mini")
    assert record.costs[0].usd == pytest.approx(price(1000, 10, "gpt-4o-mini"))
    assert record.cost is None  # a sum that left a request out would read as less


def test_the_model_local_start_serves_costs_nothing_and_says_so(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # What `%cortex local start` registers: this model name answered at that server.
    session_for(ip).endpoints["gpt-4o"] = (server.url, LOCAL_KEY)
    try:
        server.script(reply("<response>Hi.</response>", 5000, 500))
        record = run(ip, "--model gpt-4o")
    finally:
        session_for(ip).endpoints.pop("gpt-4o")
    assert record.cost == 0.0
    assert "runs on this machine" in record.cost_note
    assert "$0 (local)" in last_line(capsys.readouterr().out, "[end]")


def test_a_script_runs_no_model_and_says_so(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    record = run(ip, "--script --delay 0", "<response>Hi.</response>")
    assert record.cost == 0.0
    assert "no model was asked" in record.cost_note
    assert "$0 (no model)" in last_line(capsys.readouterr().out, "[end]")


@pytest.fixture
def helper(server: FakeOpenAIServer) -> Iterator[Agent]:
    model = OpenAIModel("gpt-4o", base_url=server.url, api_key=SECRET)
    with registered_agent("cost_helper", model) as agent:
        yield agent


NESTED = (
    '<action type="agent" id="h" mode="sync">{"name": "cost_helper", '
    '"parameters": {"task": "help"}}</action>'
)


def test_a_nested_agents_cost_on_its_own_model_is_part_of_its_callers(
    ip: InteractiveShell, server: FakeOpenAIServer, helper: Agent
) -> None:
    server.script(
        reply(NESTED, 1000, 50),  # the caller, on gpt-4o-mini
        reply("<response>Inner answer.</response>", 3000, 200),  # the helper, on gpt-4o
        reply("<response>Done.</response>", 1400, 10),
    )
    record = run(ip, "--model gpt-4o-mini")
    assert record.status == "completed"
    inner = price(3000, 200, "gpt-4o")
    outer = price(1000, 50, "gpt-4o-mini") + price(1400, 10, "gpt-4o-mini")
    assert record.actions["h"].subrun.cost == pytest.approx(inner)
    assert record.cost == pytest.approx(inner + outer)
    assert [c.model for c in record.costs] == ["gpt-4o-mini", "gpt-4o", "gpt-4o-mini"]


def test_an_llm_actions_request_is_priced_too(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.script(
        reply(
            '<action type="llm" id="s" mode="sync">{"name": "summarise", '
            '"parameters": {"text": "long"}}</action>',
            1000,
            40,
        ),
        reply("Short.", 700, 30),
        reply("<response>Done.</response>", 1200, 5),
    )
    record = run(ip, "--model gpt-4o-mini")
    expected = sum(price(p, c, "gpt-4o-mini") for p, c in ((1000, 40), (700, 30), (1200, 5)))
    assert record.cost == pytest.approx(expected)


def test_the_cost_survives_the_transcript(ip: InteractiveShell, server: FakeOpenAIServer) -> None:
    server.script(reply("<response>Hi.</response>", 800, 20))
    record = run(ip, "--model gpt-4o-mini")
    again = Run.from_jsonl(record.to_jsonl())
    assert again.cost == pytest.approx(record.cost) and again.cost_note == record.cost_note


def test_cached_prompt_tokens_cost_the_cache_read_price_and_show_in_the_usage(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # OpenAI's usage chunk says 1024 of the 1200 prompt tokens were read from its cache:
    # gpt-4o-mini bills those at half its input price.
    server.script(
        Stream([*texts("<response>Hi.</response>", 9), finish(), openai_usage(1200, 80, 1024)])
    )
    record = run(ip, "--model gpt-4o-mini")
    expected = price(1200, 80, "gpt-4o-mini", cached=1024)
    assert expected < price(1200, 80, "gpt-4o-mini")
    assert record.cost == pytest.approx(expected)
    assert record.usage == {"prompt_tokens": 1200, "completion_tokens": 80, "cached_tokens": 1024}
    assert "(1.2k in, 1.0k cached)" in last_line(capsys.readouterr().out, "[end]")
    again = Run.from_jsonl(record.to_jsonl())
    assert again.cost == pytest.approx(expected) and again.usage == record.usage
    store.open_store().flush()
    stored = open_run(record.id)
    assert stored.cost == pytest.approx(expected) and stored.usage == record.usage


def test_a_nonsense_cached_count_in_a_run_prices_as_if_absent(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    for cached in ("lots", -1, 5000, None, [3]):
        server.script(
            Stream(
                [*texts("<response>Hi.</response>", 9), finish(), openai_usage(1200, 80, cached)]
            )
        )
        record = run(ip, "--model gpt-4o-mini")
        assert record.cost == pytest.approx(price(1200, 80, "gpt-4o-mini")), cached
        assert record.usage == {"prompt_tokens": 1200, "completion_tokens": 80}


def test_transcripts_from_before_cached_counts_and_nonsense_in_one_still_read() -> None:
    # A usage chunk and a price as transcripts and stores kept them before cached counts.
    old = {
        "kind": "chunk",
        "type": "usage",
        "time": 1.0,
        "prompt_tokens": 9,
        "completion_tokens": 4,
    }

    def read(line: dict[str, Any]) -> Any:
        event = decode_event(line)
        assert isinstance(event, Chunk)
        return event.to_chunk()

    assert read(old) == Usage(9, 4)
    assert read({**old, "cached_tokens": 5}) == Usage(9, 4, 5)
    for bad in (True, -1, 10):  # a file edited by hand: not trusted either
        assert read({**old, "cached_tokens": bad}) == Usage(9, 4)
    for bad in ("lots", [3], 2.5):  # not a count at all: the line is refused, naming it
        with pytest.raises(TypeError, match="cached_tokens must be int or None"):
            read({**old, "cached_tokens": bad})
    cost = decode_event(
        {"kind": "cost", "model": "gpt-4o-mini", "time": 1.0, "usd": 0.25, "prompt_tokens": 9}
    )
    assert isinstance(cost, Cost) and cost.cached_tokens is None and cost.usd == 0.25


# ---- budgets ------------------------------------------------------------------------


def test_a_budget_stops_the_run_before_the_request_that_would_pass_it(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    tool: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The first reply reports 100,000 prompt tokens ($0.015 at gpt-4o-mini's price):
    # the second request would pass a $0.01 budget, so it is never sent.
    server.script(reply(ACTION, 100_000, 10), reply("<response>Done.</response>", 1000, 5))
    with pytest.raises(CortexRunError, match=r"the budget of \$0.01 stopped the run") as caught:
        run(ip, "--model gpt-4o-mini --budget 0.01")
    assert len(server.requests) == 1
    record = ip.user_ns["_cortex"]
    assert record.status == "budget"
    assert record.cost == pytest.approx(price(100_000, 10, "gpt-4o-mini"))
    spent = f"${record.cost:.4f}".rstrip("0")
    assert f"{spent} spent" in str(caught.value)
    assert "%cortex continue --budget MORE goes on" in str(caught.value)
    assert "\n" not in str(caught.value)
    # Everything so far is kept: the action ran, its output is bound.
    assert tool == ["x"] and ip.user_ns["got"] == "fetched x"
    assert "budget" in last_line(capsys.readouterr().out, "[end]")

    ip.run_line_magic("cortex", "continue --budget 1")
    again = ip.user_ns["_cortex"]
    assert (again.status, again.answer) == ("completed", "Done.")
    assert len(server.requests) == 2 and tool == ["x"]  # the tool did not run again


def test_a_budget_the_first_request_fits_lets_a_run_finish(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.script(reply("<response>Hi.</response>", 1000, 10))
    record = run(ip, "--model gpt-4o-mini --budget $0.05")
    assert record.status == "completed"


def test_an_unknown_price_under_a_dollar_budget_refuses_to_start_in_one_line(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    with pytest.raises(CortexRunError) as caught:
        run(ip, "--model my-private-finetune-7 --budget 0.05")
    message = str(caught.value)
    assert "no price is known for the model 'my-private-finetune-7'" in message
    assert "20000tok" in message and "\n" not in message
    assert server.requests == []
    assert ip.user_ns["_cortex"].status == "budget"


def test_a_token_budget_counts_prompt_and_completion_tokens_and_needs_no_price(
    ip: InteractiveShell, server: FakeOpenAIServer, tool: list[str]
) -> None:
    server.script(reply(ACTION, 15_000, 5_000), reply("<response>Done.</response>", 100, 5))
    with pytest.raises(CortexRunError, match="20,000 tokens spent"):
        run(ip, "--model my-private-finetune-7 --budget 20000tok")
    assert len(server.requests) == 1
    assert ip.user_ns["_cortex"].status == "budget"


def test_a_token_budget_lets_a_run_that_fits_finish(
    ip: InteractiveShell, server: FakeOpenAIServer, tool: list[str]
) -> None:
    server.script(reply(ACTION, 3_000, 100), reply("<response>Done.</response>", 3_200, 5))
    record = run(ip, "--model my-private-finetune-7 --budget 40000tok")
    assert record.status == "completed" and len(server.requests) == 2


def test_a_nested_agent_spends_its_callers_budget(
    ip: InteractiveShell, server: FakeOpenAIServer, helper: Agent
) -> None:
    # The caller's own request is cheap; its helper's (gpt-4o) is not: the caller's next
    # request would pass the budget, so it is not sent.
    server.script(
        reply(NESTED, 1000, 10),
        reply("<response>Inner.</response>", 10_000, 500),  # $0.03 at gpt-4o's price
        reply("<response>Done.</response>", 1000, 5),
    )
    with pytest.raises(CortexRunError, match="budget"):
        run(ip, "--model gpt-4o-mini --budget 0.02")
    assert len(server.requests) == 2
    assert ip.user_ns["_cortex"].status == "budget"


def test_the_budget_setting_is_the_default_and_a_cells_goes_over_it(
    ip: InteractiveShell, server: FakeOpenAIServer, magics: CortexMagics
) -> None:
    ip.run_line_magic("config", "CortexMagics.budget = '10tok'")
    with pytest.raises(CortexRunError, match="budget of 10 tokens"):
        run(ip, "--model gpt-4o-mini")
    assert server.requests == []
    server.script(reply("<response>Hi.</response>", 1000, 10))
    assert run(ip, "--model gpt-4o-mini --budget 1").status == "completed"


@pytest.mark.parametrize("value", ["-1", "abc", "0", "5tk", "0tok", "nan", "inf", "$-2"])
def test_a_bad_budget_is_refused_in_one_line_before_anything_is_sent(
    ip: InteractiveShell, server: FakeOpenAIServer, value: str
) -> None:
    with pytest.raises(UsageError, match="--budget: a budget is US dollars") as caught:
        run(ip, f"--model gpt-4o-mini --budget {value}")
    assert "\n" not in str(caught.value) and repr(value) in str(caught.value)
    assert server.requests == []


@pytest.mark.parametrize("value", ["-1", "abc", "5tk", True])
def test_a_bad_budget_setting_or_agent_budget_is_refused(
    ip: InteractiveShell, magics: CortexMagics, value: Any
) -> None:
    with pytest.raises(Exception, match="a budget is US dollars"):
        magics.budget = value
    assert magics.budget is None
    with pytest.raises(ValueError, match=r"Agent\(budget=...\): a budget is US dollars"):
        Agent(budget=value)


def test_continue_takes_only_a_budget(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="only --budget USD"):
        ip.run_line_magic("cortex", "continue --max-turns 3")


def test_an_agent_budget_stops_a_python_run_and_a_larger_one_continues_it(
    server: FakeOpenAIServer, tool: list[str]
) -> None:
    model = OpenAIModel("gpt-4o-mini", base_url=server.url, api_key=SECRET)
    server.script(reply(ACTION, 100_000, 10), reply("<response>Done.</response>", 1000, 5))
    stopped = Agent(model=model, budget="$0.01").run_sync("Go.")
    assert (stopped.status, len(server.requests)) == ("budget", 1)
    assert "Agent(budget=MORE).continue_run(run)" in (stopped.reason or "")
    larger = Agent(model=model, budget=1)
    result = anyio.run(larger.continue_run, stopped)
    assert (result.status, result.answer) == ("completed", "Done.")
    assert len(server.requests) == 2 and tool == ["x"]


def test_the_view_of_a_budget_stopped_run_says_budget_and_what_it_cost(
    ip: InteractiveShell, server: FakeOpenAIServer, tool: list[str]
) -> None:
    server.script(reply(ACTION, 100_000, 10))
    with pytest.raises(CortexRunError):
        run(ip, "--model gpt-4o-mini --budget 0.01")
    record = ip.user_ns["_cortex"]
    state = from_run(record, "gpt-4o-mini")
    assert state.phase == "budget"
    html = header_html(state)
    assert 'data-phase="budget"' in html and "$0.015" in html


def test_cortex_config_sets_the_budget(ip: InteractiveShell, magics: CortexMagics) -> None:
    ip.run_line_magic("cortex", "config budget=20000tok")
    assert str(magics.budget) == "20,000 tokens"
    ip.run_line_magic("cortex", "config budget=none")
    assert magics.budget is None


def test_the_budget_setting_holds_for_a_named_agent_without_its_own(
    ip: InteractiveShell, server: FakeOpenAIServer, magics: CortexMagics, helper: Agent
) -> None:
    ip.run_line_magic("config", "CortexMagics.budget = '10tok'")
    with pytest.raises(CortexRunError, match="budget of 10 tokens"):
        run(ip, "--agent cost_helper")
    assert server.requests == []


# ---- the context summary is a request too -------------------------------------------


SUMMARY_TEXT = "They talked about a long zeppelin report."


class Summarising(FakeOpenAIServer):
    """Answers each request from what it asks: a request for a summary of older turns
    with one, anything else with a short answer; its usage counts the prompt at about
    four characters a token (as the context module does), the replies as given."""

    def next_reply(self) -> Any:
        with self._lock:
            request = self.requests[-1]
        messages = request.json["messages"]
        prompt = prompt_tokens(messages)
        if messages[-1]["content"].startswith("Summarise this conversation"):
            return Stream([text(SUMMARY_TEXT), finish(), usage(prompt, 30)])
        return Stream([text("<response>Noted.</response>"), finish(), usage(prompt, 10)])


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(MESSAGE_OVERHEAD + round(len(m.get("content") or "") / 4) for m in messages)


def is_summary(request: Any) -> bool:
    return bool(request.json["messages"][-1]["content"].startswith("Summarise this"))


@pytest.fixture
def summarising(monkeypatch: pytest.MonkeyPatch, magics: CortexMagics) -> Iterator[Summarising]:
    with Summarising() as running:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", running.url)
        yield running


def crowded(ip: InteractiveShell, server: Summarising) -> None:
    """A first cell with a long prompt, then a context budget that leaves no room for it
    beside the system prompt and a short new prompt: the next cell must summarise it."""
    run(ip, "--model gpt-4o-mini", "Read this report: " + "the zeppelin flew on. " * 550)
    assert len(server.requests) == 1 and not is_summary(server.requests[0])
    system = prompt_tokens(server.requests[0].json["messages"][:1])
    ip.run_line_magic(
        "config", f"CortexMagics.context_tokens = {system + DEFAULT_REPLY_ROOM + 400}"
    )


def test_a_summary_request_that_would_pass_the_budget_is_not_sent(
    ip: InteractiveShell, summarising: Summarising, capsys: pytest.CaptureFixture[str]
) -> None:
    crowded(ip, summarising)
    # The summary's reply alone may take 400 tokens ($0.00024 at gpt-4o-mini's price):
    # the request would pass a $0.0001 budget, so it is not sent and the run ends
    # `budget` (before, the summary was asked unchecked, and only the turn was stopped).
    with pytest.raises(CortexRunError) as caught:
        run(ip, "--model gpt-4o-mini --budget 0.0001", "And what came next?")
    message = str(caught.value)
    assert "stopped the run before its request for a summary of the older conversation" in message
    assert "\n" not in message
    assert len(summarising.requests) == 1  # neither the summary nor the turn was sent
    record = ip.user_ns["_cortex"]
    assert record.status == "budget" and record.cost == 0
    assert "budget" in last_line(capsys.readouterr().out, "[end]")

    # Everything is kept: a larger budget goes on from there, summary first.
    ip.run_line_magic("cortex", "continue --budget 1")
    again = ip.user_ns["_cortex"]
    assert (again.status, again.answer) == ("completed", "Noted.")
    summary, turn = summarising.requests[1:]
    assert is_summary(summary) and not is_summary(turn)
    assert SUMMARY_TEXT in turn.json["messages"][1]["content"]


def test_a_summary_requests_tokens_count_in_the_runs_cost_and_usage(
    ip: InteractiveShell, summarising: Summarising, capsys: pytest.CaptureFixture[str]
) -> None:
    crowded(ip, summarising)
    capsys.readouterr()
    record = run(ip, "--model gpt-4o-mini", "And what came next?")
    summary, turn = summarising.requests[1:]
    assert is_summary(summary) and not is_summary(turn)
    asked = prompt_tokens(summary.json["messages"])
    sent = prompt_tokens(turn.json["messages"])
    assert record.usage == {"prompt_tokens": asked + sent, "completion_tokens": 30 + 10}
    expected = price(asked, 30, "gpt-4o-mini") + price(sent, 10, "gpt-4o-mini")
    assert record.cost == pytest.approx(expected)
    assert f"({fmt_count(asked + sent)} in)" in last_line(capsys.readouterr().out, "[end]")
    store.open_store().flush()
    row = next(r for r in runs(limit=5) if r.id == record.id)
    assert (row.prompt_tokens, row.completion_tokens) == (asked + sent, 40)
