"""A typed run's answer turn: check the final answer, ask again with the errors, or fail.

``Agent(output_type=T)``: when a turn ends with a final answer, ``AnswerCheck.check``
reads it (``runtime.core.values.typed``: the JSON, ``"$name"`` filled over the same scopes as
action parameters, pydantic's validation) and emits ``OutputChecked``. An answer that
fits is ``run.output``. One that does not is sent back to the model with its errors
(short ``path: message`` lines) as the next turn, up to ``output_retries`` times; a
retry is a turn like any other, so ``max_turns`` counts it. When the answer never fits,
the run ends ``failed`` with the reason ``the answer did not fit T: <first error>``;
its text stays ``run.answer`` and ``run.output`` is None.

With native tools the request carries ``response_format`` (a ``json_schema`` format),
the convention OpenAI-compatible endpoints share for a structured final message; tools
stay callable beside it (see ``OutputType.response_format`` for why ``strict`` is off).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from cortex_jupyter.runtime.core.events import OutputChecked, OutputExpected
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.core.values.typed import Checked, OutputType
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler

__all__ = ["AnswerCheck"]


class AnswerCheck:
    """The typed answer of one run (see the module docstring)."""

    def __init__(
        self, typed: OutputType, *, retries: int, scheduler: Scheduler, native: bool
    ) -> None:
        self.typed = typed
        self.retries = retries
        self.scheduler = scheduler
        self.native = native
        self.attempts = 0

    def expect(self) -> None:
        """Say, before the first turn, that the answer is typed (``OutputExpected``)."""
        self.scheduler.emit(OutputExpected(self.typed.name, time.monotonic(), self.typed.schema))

    def check(self, turn: int) -> Checked:
        """Check the run's final answer (its text as the model wrote it); an answer that
        fits becomes ``run.output``. Emits ``OutputChecked``."""
        run = self.scheduler.run
        scopes = [run.variables, self.scheduler.feeds, self.scheduler.namespace]
        checked = self.typed.check(run.final_response, scopes, wrapped=self.native)
        self.attempts += 1
        value = self.typed.json_form(checked.value) if checked.ok else None
        self.scheduler.emit(
            OutputChecked(
                self.attempts, time.monotonic(), checked.ok, value, checked.errors, turn=turn
            )
        )
        if checked.ok:
            run.output = checked.value  # the object itself (the event holds its JSON form)
        return checked

    def verdict(
        self, turn: int, max_turns: int, words: Mapping[str, str]
    ) -> tuple[str | None, str | None]:
        """Check the final answer of ``turn``: (None, None) when it fits; (what to tell
        the model, None) to ask again; (None, the run's reason) when it never fit."""
        checked = self.check(turn)
        if checked.ok:
            return None, None
        left = turn < max_turns
        if left and self.may_retry():
            return self.retry_message(checked), None
        return None, self.failure(checked, turn_left=left, words=words)

    def may_retry(self) -> bool:
        """Whether a failed answer may be sent back once more (``output_retries``)."""
        return self.attempts <= self.retries

    def retry_message(self, checked: Checked) -> str:
        """What the model is told when its answer did not fit: the errors, and to answer
        again (redacted: it is sent to the model)."""
        lines = "\n".join(f"- {error}" for error in checked.errors)
        return redact(
            f"Your final answer did not fit the type {self.typed.name}:\n{lines}\n"
            "Answer again with a final answer that is only the JSON value of that type "
            "(the schema is in your instructions), fixing these fields."
        )

    def failure(self, checked: Checked, *, turn_left: bool, words: Mapping[str, str]) -> str:
        """The run's reason when its answer never fit (one line, the first bad field)."""
        tries = f"{self.attempts} tries" if self.attempts != 1 else "1 try"
        why = f"the answer did not fit {self.typed.name}: {checked.first} ({tries})"
        if not turn_left and self.may_retry():
            why += f"; no turn was left for another try ({words['max_turns']})"
        return why

    def request(self, request: Mapping[str, Any]) -> Mapping[str, Any]:
        """The turn's extra request fields: with native tools, ``response_format`` unless
        the request sets one of its own."""
        if not self.native or "response_format" in request:
            return request
        return {**request, "response_format": self.typed.response_format()}
