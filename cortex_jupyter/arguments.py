"""The values a ``%%cortex`` line and ``%cortex config`` give, checked: each one that is
wrong is one sentence naming the option and what it takes (``UsageError``), never a
traceback. Its own module so ``magic`` reads as the magics themselves."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser, argument
from traitlets import Bool, Dict, Float, Int, Union

from cortex_jupyter.runtime.core.cost.budget import Budget
from cortex_jupyter.runtime.core.trust.secrets import shorten
from cortex_jupyter.runtime.loop.grammar import CONSTRAIN_FORMS
from cortex_jupyter.runtime.loop.request import check_request

#: The approval policies a word may name (a function is the fourth kind).
APPROVALS = ("ask", "allow", "deny")


def _subcommand(name: str, description: str) -> MagicArgumentParser:
    """The parser of ``%cortex NAME``'s words (without argparse's own ``-h``)."""
    return MagicArgumentParser(prog=f"%cortex {name}", add_help=False, description=description)


EVAL = _subcommand("eval", "Score the model on the built-in tool tasks and typed-answer tasks.")
EVAL.add_argument("--model", metavar="NAME", help="Model (default: CortexMagics.model).")
EVAL.add_argument(
    "--dialects", default="cortex,sigil,cogency,hermes,native", help="Comma-separated."
)
EVAL.add_argument("--n", "-n", type=int, default=3, help="Tries per task (default 3).")
EVAL.add_argument("--constrain", action="store_true", help="Constrained as well.")
EVAL.add_argument(
    "--tasks",
    choices=("all", "tools", "typed"),
    default="all",
    help="The built-in tool tasks, the typed-answer tasks, or both (default).",
)
EVAL.add_argument("--max-turns", type=int, default=4, metavar="N", help="Default 4.")
EVAL.add_argument("--max-tokens", type=int, metavar="N", help="Most tokens a reply (512).")
EVAL.add_argument(
    "--time-limit", type=float, metavar="SECONDS", help="Seconds a try may take (120)."
)


EXPERIMENT = _subcommand(
    "experiment", "Run a dataset's cases by each agent and show the matrix of results."
)
EXPERIMENT.add_argument("dataset", help="A notebook name holding a Dataset, or a saved file.")
EXPERIMENT.add_argument(
    "--agents", required=True,
    help="Comma-separated columns: notebook Agents, registered agents, models, dialect:model.",
)  # fmt: skip
EXPERIMENT.add_argument("--repeat", type=int, default=1, metavar="N", help="Tries a case (1).")
EXPERIMENT.add_argument("--concurrency", type=int, metavar="N", help="Tries at once a server.")
EXPERIMENT.add_argument("--budget", metavar="USD|Ntok", help="The most the whole run may spend.")
EXPERIMENT.add_argument("--name", help="The experiment's name (default: the dataset's).")

KEEP = _subcommand("keep", "Keep a column of the last --compare cell as a test case of a dataset.")
KEEP.add_argument("column", help="The column's name, as in --compare.")
KEEP.add_argument(
    "--to", required=True, metavar="DATASET",
    help="A notebook name (a Dataset, made if missing) or a .yaml/.jsonl file (appended to).",
)  # fmt: skip


def resume(words: list[str]) -> tuple[str, bool, Budget | None]:
    """``%cortex resume ID [--force] [--budget USD|Ntok]``'s words: the run id, whether to
    take a run marked running on another machine (which cannot be checked from here),
    and the budget it goes on under (None: the one its cell had)."""
    say = (
        "%cortex resume: give one run id, e.g. %cortex resume 3f2a (see %cortex runs), "
        "--force only to take a run marked running on another machine, and --budget "
        "USD|Ntok once, to go on under a new budget."
    )
    rest, force, given = list(words), False, None
    if rest.count("--force") > 1 or rest.count("--budget") > 1:
        raise UsageError(say)
    if "--force" in rest:
        rest.remove("--force")
        force = True
    if "--budget" in rest:
        at = rest.index("--budget")
        if at + 1 >= len(rest):
            raise UsageError(say)
        given = rest.pop(at + 1)
        del rest[at]
    if len(rest) != 1 or rest[0].startswith("-"):
        raise UsageError(say)
    return rest[0], force, None if given is None else budget(given, None)


#: The most rows a store can be asked for: the largest INTEGER SQLite holds.
MOST_ROWS = 2**63 - 1


def limit(raw: str, command: str) -> int:
    """``--limit N`` of ``command``: a whole number from 1 to what SQLite holds."""
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MOST_ROWS:
        raise UsageError(
            f"{command}: --limit takes a whole number from 1 to {MOST_ROWS:,} (the most "
            f"SQLite holds), not {shorten(raw, 40)!r}; e.g. --limit 50"
        )
    return value


def unquote(text: str | None) -> str | None:
    """A cell-line value as the user meant it: IPython's option parser keeps the quotes
    around ``--replay "my run.jsonl"``."""
    if text is not None and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def number(
    raw: str | None,
    flag: str,
    kind: type[int] | type[float],
    default: Any,
    *,
    low: float,
    strict: bool = False,
) -> Any:
    """A numeric option, checked: a clear sentence for anything else."""
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        noun = "whole number" if kind is int else "number"
        raise UsageError(f"%%cortex: {flag} must be a {noun}, not {raw!r}.") from None
    if value < low or (strict and value == low):
        bound = f"more than {low:g}" if strict else f"{low:g} or more"
        raise UsageError(f"%%cortex: {flag} must be {bound}, not {raw!r}.")
    return value


def request(raw: str | None) -> dict[str, Any]:
    """``--request JSON``, checked: a clear sentence for anything else."""
    if raw is None:
        return {}
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        raw = raw[1:-1]  # IPython's argument splitting keeps the quotes around JSON
    try:
        value = json.loads(raw)
    except ValueError as error:
        raise UsageError(
            f"%%cortex: --request must be a JSON object such as "
            f'\'{{"temperature": 0, "seed": 1}}\'; {raw!r} is not JSON ({error}).'
        ) from None
    try:
        return check_request(value, "--request")
    except ValueError as error:
        raise UsageError(f"%%cortex: {error}.") from None


_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True}
_BOOLEANS.update({"0": False, "false": False, "no": False, "off": False})


def coerce(trait: Any, value: str) -> Any:
    """The text of ``%cortex config name=value`` as the trait's type; ``ValueError``
    saying what the trait takes."""
    if getattr(trait, "allow_none", False) and value.lower() in ("", "none"):
        return None
    if isinstance(trait, Dict):
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError(
                """it takes a JSON object, e.g. request='{"temperature": 0}'"""
            ) from None
    if isinstance(trait, Bool):
        if value.lower() not in _BOOLEANS:
            raise ValueError("it takes true or false")
        return _BOOLEANS[value.lower()]
    if isinstance(trait, Union) and any(isinstance(t, Bool) for t in trait.trait_types):
        return _BOOLEANS.get(value.lower(), value)  # constrain=true, or a grammar form
    kind = int if isinstance(trait, Int) else float if isinstance(trait, Float) else None
    if kind is None:
        return value
    try:
        return kind(value)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        empty = " or none" if getattr(trait, "allow_none", False) else ""
        raise ValueError(f"it takes {noun}{empty}") from None


def approval(value: Any) -> Any:
    """The approval policy, checked: a mistyped word must not quietly mean "ask"."""
    if callable(value) or value in APPROVALS:
        return value
    raise UsageError(
        f"CortexMagics.approve must be 'ask', 'allow', 'deny' or a function (node) -> bool, "
        f"not {value!r}."
    )


def budget(given: str | None, default: Budget | None, option: str = "--budget") -> Budget | None:
    """``--budget USD|Ntok``, else ``CortexMagics.budget`` (checked when it was set)."""
    if given is None:
        return default
    try:
        return Budget.parse(unquote(given))
    except ValueError as error:
        raise UsageError(f"%%cortex: {option}: {error}.") from None


def constrain(given: str | None, default: bool | str) -> bool | str:
    """``--constrain [FORM]``, else ``CortexMagics.constrain`` (checked when it was set):
    False, or a grammar form."""
    value: bool | str = default if given is None else given.lower()
    if value is True or value is False:
        return "gbnf" if value else False
    if value in CONSTRAIN_FORMS:
        return str(value)
    raise UsageError(
        f"%%cortex: --constrain must be {' or '.join(CONSTRAIN_FORMS)}; got {value!r}."
    )


# ---- ``%%cortex --compare``'s options (the cell runs in ``session.compare``) -------------

_Magic = TypeVar("_Magic", bound=Callable[..., Any])


def compare_arguments(magic: _Magic) -> _Magic:
    """``--compare``, ``--repeat`` and ``--compare-budget`` on the ``%%cortex`` magic."""
    for added in reversed((
        argument(
            "--compare", metavar="A,B,C",
            help="Run the cell by several columns at once, side by side: each a model, "
            "dialect:model, a registered agent or a notebook Agent. _compare holds their runs.",
        ),
        argument(
            "--repeat", metavar="N",
            help="With --compare: each column runs N times; identical answers are counted.",
        ),
        argument(
            "--compare-budget", metavar="USD",
            help="With --compare: the most the whole cell may spend (USD or Ntok), split "
            "evenly into each run's budget (columns × repeats shares).",
        ),
    )):  # fmt: skip
        magic = added(magic)
    return magic


def compare(args: Any) -> dict[str, Any]:
    """The ``CellOptions`` fields of ``--compare``, ``--repeat`` and ``--compare-budget``;
    the last two only go with the first."""
    if args.compare is None and (args.repeat or args.compare_budget) is not None:
        alone = "--repeat N" if args.repeat is not None else "--compare-budget"
        raise UsageError(f"%%cortex: {alone} goes with --compare a,b (its columns).")
    return {
        "compare": unquote(args.compare) if args.compare is not None else None,
        "repeat": number(args.repeat, "--repeat", int, 1, low=1),
        "compare_budget": budget(args.compare_budget, None, "--compare-budget"),
    }
