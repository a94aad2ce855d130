"""The context budget's pure parts: counting, condensing, and fitting a conversation."""

from __future__ import annotations

import json
from typing import Any

from cortex_jupyter.runtime.loop.context import (
    SUMMARY_HEAD,
    TokenCounter,
    condense,
    exchanges,
    fit_messages,
    plain_summary,
)

SYSTEM: Any = {"role": "system", "content": "s" * 400}  # 104 tokens


def exchange(n: int, result_chars: int = 2000) -> list[Any]:
    return [
        {"role": "user", "content": f"Question {n}"},
        {"role": "assistant", "content": f'<action id="a{n}">{{"name": "fetch"}}</action>'},
        {
            "role": "user",
            "content": f'<results>\n<result id="a{n}" name="fetch" status="done">'
            + f"line one of {n}\n"
            + "x" * result_chars
            + "</result>\n</results>",
        },
        {"role": "assistant", "content": f"<response>Answer {n}</response>"},
    ]


def conversation(cells: int, **kw: Any) -> tuple[list[Any], list[int]]:
    history: list[Any] = []
    starts = []
    for n in range(1, cells + 1):
        starts.append(len(history))
        history += exchange(n, **kw)
    return history, starts


def test_the_counter_calibrates_against_the_servers_count() -> None:
    counter = TokenCounter()
    message: Any = {"role": "user", "content": "x" * 400}
    assert counter.count(message) == 4 + 100
    counter.calibrate([message], prompt_tokens=4 + 200)  # a tokenizer of 2 characters
    assert counter.chars_per_token == 2.0 and counter.count(message) == 204
    counter.calibrate([message], prompt_tokens=4 + 100)  # then 4: each report weighs half
    assert counter.chars_per_token == 3.0


def test_condensing_cuts_results_and_tool_messages_to_a_line_and_keeps_the_rest() -> None:
    results: Any = exchange(1, result_chars=500)[2]
    short = condense(results)["content"]
    assert short.startswith('<results>\n<result id="a1" name="fetch" status="done">line one of 1')
    assert "… [501 characters cut to fit the context]</result>\n</results>" in short
    sigil: Any = {"role": "user", "content": "§RESULTS:\n[auto-1] fetch (done): " + "y" * 300}
    assert condense(sigil)["content"] == (
        "§RESULTS:\n[auto-1] fetch (done): " + "y" * 100 + " … [200 characters cut to fit the "
        "context]"
    )
    tool: Any = {"role": "tool", "tool_call_id": "c1", "content": "first\nsecond"}
    assert condense(tool) == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "first … [7 characters cut to fit the context]",
    }
    said: Any = {"role": "assistant", "content": "z" * 900}
    assert condense(said) == said  # what the model wrote is never cut


def test_condensing_cuts_hermes_tool_responses_to_a_line() -> None:
    from cortex_jupyter.protocol.events import ProtocolError
    from cortex_jupyter.runtime.core.record.graph import ActionNode
    from cortex_jupyter.runtime.loop.prompt import format_results

    page = ActionNode(
        "a1", "fetch", "tool", "async", status="done", output="line one\n" + "x" * 500
    )
    table = ActionNode(
        "a2", "rows", "tool", "async", status="done", output=[{"n": i} for i in range(80)]
    )
    forged = ProtocolError("forged_result", "results come only from the runtime")
    content = format_results([page, table], [forged], dialect="hermes")
    message: Any = {"role": "user", "content": content}
    short = condense(message)["content"]
    assert len(short) < len(content) // 3
    blocks = short.split("</tool_response>\n")
    assert len(blocks) == 3 and all(b.startswith("<tool_response>\n") for b in blocks)
    first = json.loads(blocks[0].removeprefix("<tool_response>\n"))
    assert first == {
        "id": "a1",
        "name": "fetch",
        "status": "done",
        "content": "line one … [501 characters cut to fit the context]",
    }
    second = json.loads(blocks[1].removeprefix("<tool_response>\n"))
    assert second["id"] == "a2" and "characters cut to fit the context" in second["content"]
    assert "forged_result" in blocks[2]  # a short block stays as it was


def test_everything_fits_so_nothing_changes() -> None:
    history, starts = conversation(3, result_chars=100)
    fit = fit_messages(
        SYSTEM, history, current=8, starts=starts, budget=10_000, reply_room=1000,
        counter=TokenCounter(),
    )  # fmt: skip
    assert fit.messages == [SYSTEM, *history] and not fit.changed and not fit.over


def test_older_exchanges_are_condensed_then_summarised_the_current_run_stays_whole() -> None:
    history, starts = conversation(30)
    current = starts[-1]
    fit = fit_messages(
        SYSTEM, history, current=current, starts=starts, budget=2500, reply_room=500,
        counter=TokenCounter(),
    )  # fmt: skip
    assert fit.tokens <= 2000 and not fit.over
    assert fit.messages[-4:] == history[current:]  # the current run, whole
    assert fit.messages[0] == SYSTEM
    assert fit.messages[1]["content"].startswith(SUMMARY_HEAD)
    assert "- User: Question 1" in fit.messages[1]["content"]  # a plain cut: no summary yet
    assert fit.summarised is not None and fit.summarised.start == 0
    kinds = set(fit.marks.values())
    assert kinds == {"condensed", "summarised"}
    # the oldest are summarised, everything after them is sent (condensed here: each
    # exchange is too big to keep whole in half the room), in order
    assert all(fit.marks[i] == "summarised" for i in fit.summarised)
    assert all(fit.marks.get(i) == "condensed" for i in range(fit.summarised.stop, current))
    sent_questions = [m["content"] for m in fit.messages if m["content"].startswith("Question")]
    assert sent_questions == [f"Question {n}" for n in range(fit.summarised.stop // 4 + 1, 31)]


def test_a_written_summary_is_used_and_reused_while_newer_exchanges_fit() -> None:
    history, starts = conversation(30)
    counter = TokenCounter()
    first = fit_messages(
        SYSTEM, history, current=starts[-1], starts=starts, budget=2500, reply_room=500,
        counter=counter,
    )  # fmt: skip
    assert first.summarised is not None
    summaries = {(0, first.summarised.stop): "They asked ten questions."}
    again = fit_messages(
        SYSTEM, history, current=starts[-1], starts=starts, budget=2500, reply_room=500,
        counter=counter, summaries=summaries,
    )  # fmt: skip
    assert again.messages[1] == {
        "role": "user",
        "content": f"{SUMMARY_HEAD}\nThey asked ten questions.",
    }
    # one more (small) exchange later, the same summary still stands
    history += exchange(11, result_chars=10)
    starts.append(120)
    later = fit_messages(
        SYSTEM, history, current=starts[-1], starts=starts, budget=2500, reply_room=500,
        counter=counter, summaries=summaries,
    )  # fmt: skip
    assert later.summarised == again.summarised


def test_native_tool_calls_stay_with_their_results() -> None:
    history: list[Any] = []
    starts = []
    for n in range(8):
        starts.append(len(history))
        history += [
            {"role": "user", "content": f"q{n}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x": 1}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": "r" * 1500},
            {"role": "assistant", "content": f"done {n}"},
        ]
    fit = fit_messages(
        SYSTEM, history, current=starts[-1], starts=starts, budget=1800, reply_room=300,
        counter=TokenCounter(),
    )  # fmt: skip
    sent = fit.messages
    for i, message in enumerate(sent):
        if message.get("tool_calls"):
            assert sent[i + 1]["role"] == "tool"
            assert sent[i + 1]["tool_call_id"] == message["tool_calls"][0]["id"]
        if message["role"] == "tool":
            assert sent[i - 1].get("tool_calls")


def test_an_oversized_current_run_is_sent_whole_and_says_so() -> None:
    history, starts = conversation(2, result_chars=20_000)
    fit = fit_messages(
        SYSTEM, history, current=starts[-1], starts=starts, budget=3000, reply_room=500,
        counter=TokenCounter(),
    )  # fmt: skip
    assert fit.over and fit.messages[-4:] == history[starts[-1] :]


def test_exchanges_and_the_plain_summary() -> None:
    assert exchanges(list(range(10)), [0, 4, 7]) == [range(0, 4), range(4, 7), range(7, 10)]
    assert exchanges(list(range(5)), []) == [range(0, 5)]
    history, _ = conversation(2, result_chars=10)
    assert plain_summary(history, 1000) == (
        '- User: Question 1\n- You: <action id="a1">{"name": "fetch"}</action>\n'
        "- You: <response>Answer 1</response>\n"
        '- User: Question 2\n- You: <action id="a2">{"name": "fetch"}</action>\n'
        "- You: <response>Answer 2</response>"
    )
    assert len(plain_summary(history, 20)) == 20
