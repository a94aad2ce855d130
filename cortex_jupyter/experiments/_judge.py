"""``expect.judge``: a model grades the run's answer by a rubric.

The judge is asked once per try: a system message saying how to reply, and a user
message holding the rubric, the case's prompt and the run's answer, each redacted
(``secrets.redact``: what is sent to a model never holds a secret) and cut to a bound.
It replies JSON ``{"pass": bool, "score": 0..1, "reason": str}``; sloppy replies are
read as well as they can be (code fences, prose around the object, a score as text, a
missing score taken from ``pass``). Each request's usage and price go to the context's
``judge_spend``, apart from the agent's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cortex_jupyter.experiments.results import Expectation, JudgeContext, Verdict
from cortex_jupyter.runtime.core.cost.prices import price_request
from cortex_jupyter.runtime.core.model.chunks import Message, TextChunk, Usage, close_stream
from cortex_jupyter.runtime.core.trust.secrets import redact, shorten

__all__ = ["Judge", "read_reply"]

#: The most characters of the prompt and of the answer the judge is sent.
MAX_SENT = 20_000
#: A judge's reply is a short JSON object: its request caps it at this many tokens (a small
#: local model left alone ran 6,500 tokens to the end of its window), and no more than
#: ``MAX_READ`` characters of it are read (a server that ignores the cap).
JUDGE_MAX_TOKENS = 512
MAX_READ = 20_000
_SYSTEM = (
    "You grade an AI assistant's answer by a rubric. Reply with one JSON object and "
    'nothing else: {"pass": true or false, "score": a number from 0 to 1, '
    '"reason": "one short sentence"}.'
)
_FENCE = re.compile(r"```(?:json)?", re.IGNORECASE)


def _short(text: str, limit: int = 60) -> str:
    return shorten(" ".join(str(text).split()), limit)


def _truth(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "pass", "passed"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "fail", "failed"):
        return False
    return None


def _score(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            value = float(value.strip().rstrip("%")) / (100 if "%" in value else 1)
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value):
        return min(max(float(value), 0.0), 1.0)
    return None


def read_reply(text: str) -> tuple[bool | None, float | None, str] | None:
    """(pass, score, reason) from a judge's reply, or None when no JSON object with a
    pass or a score is in it."""
    cleaned = _FENCE.sub("", text)
    decoder = json.JSONDecoder()
    for found in re.finditer(r"\{", cleaned):
        try:
            value, _ = decoder.raw_decode(cleaned, found.start())
        except (ValueError, RecursionError):
            continue
        if not isinstance(value, dict):
            continue
        passed = _truth(value.get("pass", value.get("passed")))
        score = _score(value.get("score"))
        if passed is None and score is None:
            continue
        reason = value.get("reason", "")
        return passed, score, reason if isinstance(reason, str) else json.dumps(reason)
    return None


@dataclass(frozen=True)
class Judge(Expectation):
    """A model grades the answer by ``rubric`` (see ``expect.judge``)."""

    kind = "judge"
    rubric: str = ""
    model: Any = None
    threshold: float = 0.5
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.rubric, str) or not self.rubric.strip():
            raise ValueError("expect.judge: rubric is the text the judge grades by")
        threshold = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError(f"expect.judge: threshold is in [0, 1]; got {threshold!r:.40}")
        if not 0 <= threshold <= 1:
            raise ValueError(f"expect.judge: threshold is in [0, 1]; got {threshold!r:.40}")
        object.__setattr__(self, "threshold", float(threshold))

    def check(self, run: Any) -> Verdict:
        """Ask the judge outside an event loop (the runner awaits ``acheck``)."""
        import anyio
        import sniffio

        try:
            sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            return anyio.run(self.acheck, run, JudgeContext())
        return Verdict.of(False, "a judge is awaited: use `await expectation.acheck(run, context)`")

    async def acheck(self, run: Any, context: JudgeContext) -> Verdict:
        model = self.model if self.model is not None else context.judge_model
        if model is None:
            return Verdict.of(False, "no judge model: give expect.judge(model=...)")
        if isinstance(model, str):
            try:
                from cortex_jupyter.models import OpenAIModel

                model = OpenAIModel(model)
            except Exception as exc:  # no key, a bad base URL: the verdict says so
                return Verdict.of(False, f"judge model unusable: {_short(redact(str(exc)), 120)}")
        lock = context.judge_lock if context.judge_budget is not None else None
        if lock is None:
            return await self._asked(model, run, context)
        # One judge request at a time under a budget: each checks what the last one spent
        # (eight at once all found it unspent and passed it eightfold).
        async with lock:
            return await self._asked(model, run, context)

    async def _asked(self, model: Any, run: Any, context: JudgeContext) -> Verdict:
        spent = _over_budget(context)
        if spent is not None:
            return Verdict.of(False, spent)
        try:
            text, usage = await _ask(model, self._messages(run, context))
        except Exception as exc:  # the judge's server failed: this try is not judged
            why = f"{type(exc).__name__}: {_short(redact(str(exc)))}"
            return Verdict.of(False, f"judge failed: {why}")
        counts = {"prompt_tokens": 0, "completion_tokens": 0}
        if usage is not None:
            counts = {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            }
        context.judge_spend.append((counts, price_request(model, usage).usd))
        return self._verdict(text)

    def _messages(self, run: Any, context: JudgeContext) -> list[Message]:
        prompt = getattr(context.case, "prompt", None)
        if not isinstance(prompt, str):
            prompt = getattr(run, "prompt", "")
        answer = getattr(run, "answer", "")
        parts = [
            f"Rubric:\n{self.rubric}",
            f"The user's prompt:\n{shorten(redact(str(prompt)), MAX_SENT)}",
            f"The assistant's answer:\n{shorten(redact(str(answer)), MAX_SENT)}",
        ]
        return [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": redact("\n\n".join(parts))},
        ]

    def _verdict(self, text: str) -> Verdict:
        read = read_reply(text)
        if read is None:
            return Verdict.of(False, f"judge reply unreadable: {_short(redact(text))}")
        passed, score, reason = read
        if score is None:
            score = 1.0 if passed else 0.0
        held = (True if passed is None else passed) and score >= self.threshold
        return Verdict(
            held, score, _short(redact(reason), 200), {"judge": _short(redact(reason), 500)}
        )

    def to_data(self) -> dict[str, Any]:
        if self.model is not None and not isinstance(self.model, str):
            raise ValueError(
                "expect.judge: model is a model object, which a saved dataset cannot keep; "
                "give its name (a text) instead"
            )
        out: dict[str, Any] = {"kind": self.kind, "rubric": self.rubric}
        if self.model is not None:
            out["model"] = self.model
        if self.threshold != 0.5:
            out["threshold"] = self.threshold
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Judge:
        return cls(
            data.get("rubric", ""), model=data.get("model"),
            threshold=data.get("threshold", 0.5), name=data.get("name"),
        )  # fmt: skip


async def _ask(model: Any, messages: list[Message]) -> tuple[str, Usage | None]:
    """The judge's reply text and the usage its server reported."""
    chunks = model.stream(messages, max_tokens=JUDGE_MAX_TOKENS)
    pieces: list[str] = []
    read = 0
    usage: Usage | None = None
    try:
        async for chunk in chunks:
            if isinstance(chunk, TextChunk):
                pieces.append(chunk.text)
                read += len(chunk.text)
                if read >= MAX_READ:
                    break  # what the JSON object was going to say, it has said by now
            elif isinstance(chunk, Usage):
                usage = chunk
    finally:
        await close_stream(chunks)
    return "".join(pieces)[:MAX_READ], usage


def _over_budget(context: JudgeContext) -> str | None:
    """Why the judge may not ask again (its own budget is spent), or None."""
    budget = context.judge_budget
    if budget is None:
        return None
    if budget.unit == "tok":
        spent = float(sum(sum(counts.values()) for counts, _ in context.judge_spend))
    else:
        costs = [usd for _, usd in context.judge_spend]
        if any(usd is None for usd in costs):
            return (
                f"the judge's budget of {budget} cannot be kept: a judge request's price is unknown"
            )
        spent = float(sum(usd for usd in costs if usd is not None))
    if spent >= budget.limit:
        return f"the judge's budget of {budget} is spent ({budget.show(spent)}): not judged"
    return None
