"""A reply cap the budget sets above what the model allows (issue 33, item 5's loose ends).

Under a budget each reply is sent with the cap the budget leaves it as ``max_tokens``;
OpenAI refuses a cap above the model's own limit with a 400 (vLLM one above what its window
leaves). Through the real SDK against the loopback server: the request is sent again once
with the limit the server named, and later requests send it at once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter.session import CortexRunError
from tests.models.fake_openai_server import Error, FakeOpenAIServer, Stream, finish, texts, usage

LIMIT = 4_000  # the most completion tokens the server's model allows
CELL = "--text --model my-private-finetune-7 --budget 20000tok"


def reply(body: str, prompt: int = 900, completion: int = 10, **options: Any) -> Stream:
    return Stream([*texts(body, 9), finish(), usage(prompt, completion)], **options)


def caps(server: FakeOpenAIServer) -> list[int | None]:
    return [r.json.get("max_tokens") for r in server.requests]


def test_a_budget_cap_above_the_models_limit_is_sent_again_at_the_limit(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # 20,000 tokens leave the reply ~18,900 after the prompt: more than the model allows.
    server.max_reply = LIMIT
    server.script(reply("<response>Hi.</response>"), reply("<response>Again.</response>"))
    ip.run_cell_magic("cortex", CELL, "Hi?")
    record = ip.user_ns["_cortex"]
    assert record.status == "completed" and record.answer == "Hi."
    first, again = caps(server)
    assert first is not None and first > LIMIT and again == LIMIT
    # the refused request cost nothing: only the answered one counts
    assert record.usage == {"prompt_tokens": 900, "completion_tokens": 10}
    # the limit is remembered for this endpoint and model: the next cell sends it at once
    ip.run_cell_magic("cortex", CELL, "Again?")
    assert ip.user_ns["_cortex"].status == "completed"
    assert caps(server)[2:] == [LIMIT]


def test_a_reply_cut_at_the_models_limit_is_truncated_not_budget(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # The budget's cap was refused; the reply then stops at the model's own limit: the
    # budget did not cut it (it left more), so the run is truncated, as without a budget.
    server.max_reply = LIMIT
    cut = Stream([*texts("A long answer", 9), finish("length"), usage(900, 99_999)], at_cap=True)
    server.script(cut)
    with pytest.raises(CortexRunError, match="cut off at its token limit"):
        ip.run_cell_magic("cortex", CELL, "Go.")
    record = ip.user_ns["_cortex"]
    assert record.status == "truncated"
    assert caps(server)[-1] == LIMIT
    assert record.usage == {"prompt_tokens": 900, "completion_tokens": LIMIT}


def test_max_tokens_above_the_models_limit_is_sent_again_at_the_limit(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.max_reply = LIMIT
    server.script(reply("<response>Hi.</response>"))
    ip.run_cell_magic("cortex", "--text --model my-private-finetune-7 --max-tokens 20000", "Hi?")
    assert ip.user_ns["_cortex"].status == "completed"
    assert caps(server) == [20_000, LIMIT]


def test_an_llm_actions_cap_above_the_models_limit_is_sent_again_at_the_limit(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.max_reply = LIMIT
    server.script(
        reply(
            '<action type="llm" id="q" mode="sync">{"name": "complete", '
            '"parameters": {"prompt": "Say yes."}}</action>'
        ),
        reply("Yes."),
        reply("<response>Done.</response>"),
    )
    ip.run_cell_magic("cortex", CELL, "Ask.")
    record = ip.user_ns["_cortex"]
    assert record.status == "completed" and record.actions["q"].output == "Yes."
    assert all(cap is not None and cap <= LIMIT for cap in caps(server)[1:])
    assert len(server.requests) == 4  # the first turn's refused cap, and nothing else


def test_vllms_refusal_names_its_window_and_the_request_fits_in_it(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # vLLM says its window and the prompt's tokens: the reply may take what they leave.
    said = (
        "'max_tokens' or 'max_completion_tokens' is too large: 18000. This model's maximum "
        "context length is 8192 tokens and your request has 1100 input tokens "
        "(18000 > 8192 - 1100). None"
    )
    body = {"error": {"message": said, "type": "BadRequestError", "param": None, "code": 400}}
    server.script(Error(400, body), reply("<response>Hi.</response>"))
    ip.run_cell_magic("cortex", CELL, "Hi?")
    assert ip.user_ns["_cortex"].status == "completed"
    assert caps(server)[1] == 8192 - 1100


LLM_ACTION = (
    '<action type="llm" id="q" mode="sync">{"name": "complete", "output_key": "said", '
    '"parameters": {"prompt": "Say a lot."}}</action>'
)


def test_an_llm_reply_the_budget_cut_is_a_partial_output_and_the_run_says_so(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # The llm action's reply runs to the cap the budget left it: its text is the output,
    # but partial; the node says so, the cell says so, and the run stops as budget (what
    # the budget left went to that reply) instead of asking the model for another turn.
    cut = Stream([*texts("Part of a long text", 9), finish("length"), usage(10, 99_999)])
    server.script(reply(LLM_ACTION), replace(cut, at_cap=True), reply("<response>Done.</response>"))
    capsys.readouterr()
    with pytest.raises(CortexRunError) as caught:
        ip.run_cell_magic("cortex", CELL, "Ask.")
    record = ip.user_ns["_cortex"]
    node = record.actions["q"]
    cap = server.requests[1].json["max_tokens"]
    assert node.status == "done" and node.output == "Part of a long text"
    assert ip.user_ns["said"] == "Part of a long text"
    assert node.note == (
        f"the budget of 20,000 tokens cut this reply at {cap:,} tokens, all it left for it "
        '(finish_reason "length"): the output is partial'
    )
    # one report, wrapped between words at the cell's width
    assert f"cortex: q: {node.note}" == " ".join(capsys.readouterr().err.split())
    assert record.status == "budget" and len(server.requests) == 2
    message = str(caught.value)
    assert f"the budget of 20,000 tokens cut the reply of an llm action at {cap:,}" in message
    assert "its output is partial" in message and "%cortex continue --budget MORE" in message
    assert "\n" not in message and record.reason == message


def test_an_llm_reply_cut_at_the_users_max_tokens_is_its_output_as_before(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    cut = Stream([*texts("Part of a long text", 9), finish("length"), usage(10, 100)])
    server.script(reply(LLM_ACTION), cut, reply("<response>Done.</response>"))
    ip.run_cell_magic("cortex", f"{CELL} --max-tokens 100", "Ask.")
    record = ip.user_ns["_cortex"]
    assert record.status == "completed" and record.actions["q"].note is None
    assert record.actions["q"].output == "Part of a long text"
    assert server.requests[1].json["max_tokens"] == 100
