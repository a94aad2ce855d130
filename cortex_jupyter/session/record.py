"""What a cell leaves behind, and how it ends: the ``_cortex`` record and its errors.

Its own module because the record outlives the cell (``_cortex``, ``%cortex continue``,
``%cortex debug`` read it long after the view closed), and the end of a cell -- one
``cortex:`` line per thing gone wrong, or ``CortexRunError`` for a missing answer --
depends on the record alone, not on how the run was wired.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any, ClassVar

from IPython.display import SVG

from cortex_jupyter.runtime import Run
from cortex_jupyter.runtime.core.trust.secrets import redact, shorten

RUN_VARIABLE = "_cortex"
#: Run statuses that end a cell with an error line (the answer never came).
UNFINISHED = frozenset(("interrupted", "failed", "turn_limit", "truncated", "budget"))
#: Run statuses ``%cortex continue`` can pick up from.
CONTINUABLE = frozenset(("interrupted", "cancelled", "turn_limit", "truncated", "budget"))


class CortexRunError(Exception):
    """Raised when a cell's run ends without an answer (model failure, turn limit).

    IPython shows ``_render_traceback_``'s lines instead of a traceback: the reason is
    one sentence, and the full story is on ``_cortex`` and in the view above.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"cortex: {self}"]


class CortexInterrupt(KeyboardInterrupt):
    """Raised when the Stop button ended a run: a ``KeyboardInterrupt``, so "Run all" stops.

    The traceback through the magic, the session and the bridge says nothing a user can
    act on, so IPython shows this one line instead (the line above it says what was kept).
    """

    def _render_traceback_(self) -> list[str]:
        return ["KeyboardInterrupt: the cortex run was stopped"]


class NotebookRun(Run):
    """The run record as the notebook sees it (``_cortex``): a ``Run`` plus pictures, and
    a way to wait for the actions that outlive their cell."""

    #: Its reasons name the magic's commands and options, which the user typed.
    words: ClassVar[str] = "magic"
    #: Runs a no-op on the loop that runs the actions: once it returns, a step of that
    #: loop which settled an action has also bound its variable.
    _barrier: Callable[[], object] | None = None
    #: The unexpected exception that failed the run, if one did (``%cortex debug``
    #: prints its traceback); an action's own failure is on its node, ``.exception``.
    error: BaseException | None = None

    def wait(self, timeout: float | None = 30.0) -> NotebookRun:
        """Block until every action has ended, ``fire_and_forget`` ones too (their
        variables bound); returns the run. Raises ``TimeoutError`` naming the actions
        still running after ``timeout`` seconds (``None``: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while running := [node.id for node in unfinished(self)]:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"after {timeout:g} s these actions are still running: "
                    f"{', '.join(running)} (%cortex stop cancels them)"
                )
            time.sleep(0.01)
        if self._barrier is not None:
            self._barrier()
        return self

    def fail(self, failure: BaseException) -> CortexRunError:
        """Mark the run failed by an unexpected error (a bug, ours or a host's): the
        error is ``.error``, the reason one line. Returns the error that ends the cell."""
        error = innermost(failure)
        self.error = error
        self.status = "failed"
        self.ended = self.ended or time.monotonic()
        self.reason = self.reason or failure_line(error)
        return CortexRunError(
            f"the run failed: {failure_line(error)}. What arrived is on _cortex; "
            "%cortex debug shows the traceback."
        )

    def timeline(self) -> Any:
        """A picture of the run over time: the stream's spans and one bar per action."""
        from cortex_jupyter.display import timeline_svg  # light to load the extension

        return SVG(timeline_svg(self))


def adopt(run: Run) -> NotebookRun:
    """``run`` (a record read back, as ``open_run`` gives it) as the notebook's record of
    the same run: every field kept, its id too (a resumed run goes on in it)."""
    if isinstance(run, NotebookRun):
        return run
    adopted = NotebookRun.__new__(NotebookRun)
    adopted.__dict__.update(vars(run))
    return adopted


def report(run: NotebookRun) -> None:
    """End the cell: a short line for failed actions, an error for a missing answer."""
    failed = [node for node in run.actions.values() if node.status == "failed"]
    if failed:
        names = ", ".join(f"{node.id} ({node.name})" for node in failed[:3])
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        say(f"cortex: {len(failed)} action(s) failed: {names}{more}; its panel above says why.")
    for note in run.notes:
        say(f"cortex: {note}")
    still = [node.id for node in unfinished(run)]
    if still:
        print(
            f"cortex: {len(still)} fire_and_forget action(s) still running "
            f"({', '.join(still[:5])}); the graph, _cortex and their variables update "
            "when they end. %cortex stop cancels them."
        )
    if run.status in UNFINISHED:
        reason = run.reason or f"the run ended {run.status!r}"
        hint = " Continue it with %cortex continue." if run.status in CONTINUABLE else ""
        if run.status == "turn_limit":
            reason = f"the run stopped after {run.turns} turns without a final answer."
            hint = " Continue it with %cortex continue, or allow more turns with --max-turns N."
        if run.status in ("truncated", "budget"):
            hint = ""  # the reason says what to do already
        raise CortexRunError(redact(f"{reason}{hint}"))


#: Columns a line under the cell is wrapped at, between words: JupyterLab breaks its
#: outputs' lines anywhere (``word-break: break-all``), in the middle of a word too.
LINE_WIDTH = 88


def say(text: str) -> None:
    """One report under the cell on stderr, wrapped between words (never inside one);
    secrets redacted first: a secret of several words wrapped is two texts, and an
    action's name or id is the model's (or the script's) text."""
    lines = textwrap.wrap(
        " ".join(redact(text).split()), LINE_WIDTH, subsequent_indent="  ", break_long_words=False,
        break_on_hyphens=False,
    )  # fmt: skip
    print("\n".join(lines), file=sys.stderr)


def nothing() -> None:
    """What ``NotebookRun.wait`` runs on the actions' loop, as a barrier."""


def unfinished(run: Run) -> list[Any]:
    """The run's actions that have not reached a final status (fire_and_forget ones,
    once the run has ended)."""
    return [node for node in list(run.actions.values()) if not node.final]


def innermost(exc: BaseException) -> BaseException:
    """The error a task group's ``ExceptionGroup`` wraps (its first, at any depth)."""
    # A (Base)ExceptionGroup (3.10 has only the backport, so no isinstance here).
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner, tuple):
        exc = inner[0]
    return exc


def failure_line(exc: BaseException) -> str:
    """One line for an unexpected failure: the innermost error of a task group's
    ``ExceptionGroup``, with its type, secrets redacted."""
    exc = innermost(exc)
    text = shorten(" ".join(str(exc).split()), 300)  # redacted first, no part of a secret
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
