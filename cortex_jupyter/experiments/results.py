"""What judging one try gives, and what every expectation is: the shapes the rest of
``cortex_jupyter.experiments`` shares (cases, expectations, the runner, the report and
the view all read these and nothing else of each other).

A ``Verdict`` is one expectation's judgement of one try: pass or fail, a score in
[0, 1] and a short reason (``details`` carries what a view lays over the try's graph:
missing, extra and out-of-order actions, broken ``before`` edges, a typed answer's
difference). An ``Expectation`` judges a finished run from its record alone (a live
``Run`` or one ``open_run`` read back), so scoring again never asks the agent's model.
A ``Try`` is one (case, agent, repeat): its run's id and figures, and its verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cortex_jupyter.runtime import Run

__all__ = ["KINDS", "Expectation", "JudgeContext", "Try", "Verdict", "from_data"]


@dataclass(frozen=True)
class Verdict:
    """One expectation's judgement of one try.

    ``passed`` says whether it held; ``score`` is in [0, 1] (partial credit: 1.0 when a
    pass/fail check passed, 0.0 when it failed); ``reason`` is one short line, said to a
    person ("answer lacks 'Paris'"); ``details`` is plain data for views (lists of action
    names, pairs of names, a field-by-field difference), never live objects.
    """

    passed: bool
    score: float
    reason: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        score = float(self.score)
        if not math.isfinite(score) or not 0.0 <= score <= 1.0:
            raise ValueError(f"a verdict's score is in [0, 1]; got {self.score!r}")
        object.__setattr__(self, "score", score)

    @classmethod
    def of(cls, passed: bool, reason: str = "", **details: Any) -> Verdict:
        """A pass/fail verdict: its score is 1.0 or 0.0."""
        return cls(bool(passed), 1.0 if passed else 0.0, reason, details)


@dataclass(frozen=True)
class JudgeContext:
    """What an expectation may need besides the run: the case it belongs to, and for an
    LLM judge the model to ask when it names none (``judge_model``) and where its
    requests are counted, apart from the agent's (``judge_spend``: a list the judge
    appends one ``(usage dict, cost or None)`` per request to)."""

    case: Any = None
    judge_model: Any = None
    judge_spend: list[tuple[dict[str, int], float | None]] = field(default_factory=list)
    #: The most the judge may spend over the experiment (a ``Budget``: dollars or tokens),
    #: apart from the agents' budget; None: no limit.
    judge_budget: Any = None
    #: Held around each judge request while ``judge_budget`` is set (an ``anyio.Lock``
    #: shared by the experiment's tries), so the budget is checked after the last spend.
    judge_lock: Any = None


#: Every expectation class by its ``kind`` (filled as subclasses are defined), so a saved
#: dataset's plain data (``{"kind": "tools", ...}``) is made into expectations again.
KINDS: dict[str, type[Expectation]] = {}


def from_data(data: Mapping[str, Any]) -> Expectation:
    """The expectation ``data`` (``Expectation.to_data()``'s form) describes; ``ValueError``
    names a kind no expectation has."""
    if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
        raise ValueError(f"an expectation is a mapping with a 'kind'; got {data!r:.80}")
    cls = KINDS.get(data["kind"])
    if cls is None:
        raise ValueError(
            f"no expectation of kind {data['kind']!r:.40}; the kinds are {', '.join(sorted(KINDS))}"
        )
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        # Its label keys the try's verdicts and names a column: a list or a mapping from a
        # file stopped the whole experiment, and a number became text once stored.
        raise ValueError(f"an expectation's name is text; got {name!r:.40}")
    return cls.from_data(data)


class Expectation:
    """What a try must show. Subclasses set ``kind`` and implement ``check``.

    ``name`` is its column in ``Experiment.to_pandas()`` and the matrix (the kind,
    unless given: a case's expectations of one kind are numbered ``tools``, ``tools#2``).
    ``check(run)`` reads the finished run's record only and returns a ``Verdict``; an
    expectation that must ask a model (the judge) overrides ``acheck`` instead.
    ``to_data()`` is its plain-data form for a saved dataset (YAML, JSONL); one holding a
    function raises ``ValueError`` naming the field, since a function cannot be saved.
    """

    kind: str = "expectation"
    name: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            KINDS[cls.kind] = cls

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Expectation:
        """Made again from ``to_data()``'s form (each kind reads its own fields)."""
        raise NotImplementedError

    def check(self, run: Run) -> Verdict:
        raise NotImplementedError

    async def acheck(self, run: Run, context: JudgeContext) -> Verdict:
        """Judge ``run`` (the runner calls this; the default is ``check``, in a worker
        thread: a user's ``check=`` or predicate that is slow or hangs would otherwise hold
        the event loop every running try streams on, and a Stop could not end it)."""
        import anyio.to_thread

        return await anyio.to_thread.run_sync(self.check, run, abandon_on_cancel=True)

    def to_data(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def label(self) -> str:
        return self.name or self.kind


@dataclass
class Try:
    """One (case, agent, repeat) of an experiment, and how it was judged.

    ``run_id`` is its run in the store (``open_run(run_id)``); ``run`` is the live record
    while this process holds it (None once read back from the store, or when the try
    never ran). ``status`` is the run's status, or ``"error"`` when the try could not be
    run at all (``error`` says why). ``verdicts`` maps each expectation's label to its
    verdict (the always-on protocol check is ``protocol``). ``cost`` is None when the
    price is unknown; ``seconds`` is the run's wall time; ``first_action`` the seconds
    from the run's start to its first action's start (None: no action).
    """

    case: str
    agent: str
    repeat: int
    run_id: str | None = None
    status: str = "pending"
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    cost: float | None = None
    tokens: int = 0
    seconds: float | None = None
    first_action: float | None = None
    error: str | None = None
    run: Any = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.case, self.agent, self.repeat)

    @property
    def done(self) -> bool:
        """Whether it ran to an end (any end): ``pending``/``running`` tries are not."""
        return self.status not in ("pending", "running")

    @property
    def passed(self) -> bool:
        """Every expectation held (a try with no verdicts, or one that never ran, did not pass)."""
        return self.done and bool(self.verdicts) and all(v.passed for v in self.verdicts.values())

    @property
    def score(self) -> float:
        """The mean of its verdicts' scores (0.0 with none)."""
        if not self.verdicts:
            return 0.0
        return sum(v.score for v in self.verdicts.values()) / len(self.verdicts)

    def reasons(self) -> list[str]:
        """Why it failed: ``label: reason`` for each verdict that did not hold."""
        out = [f"{label}: {v.reason}" for label, v in self.verdicts.items() if not v.passed]
        if self.error:
            out.insert(0, self.error)
        return out
