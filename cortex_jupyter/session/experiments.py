"""``%cortex experiment DATASET --agents a,b [--repeat N]``: a dataset run from a line.

``DATASET`` is a notebook name holding a ``Dataset`` or the path of a saved one (YAML,
JSONL). Each name in ``--agents`` is a notebook name holding an ``Agent``, a registered
agent's name, a model name, or ``dialect:model`` (the session's defaults with that
model and dialect, as a ``%%cortex --model M --dialect D`` cell would run). Its own
module, so the session's coordinator is not visited again (STYLE.md, fifth round).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from cortex_jupyter.runtime import Agent
from cortex_jupyter.runtime.loop.agent import _DIALECTS
from cortex_jupyter.session.cell import CellOptions, cell_agent
from cortex_jupyter.session.notebook import Session

__all__ = ["ExperimentRefused", "columns", "dataset_named"]


class ExperimentRefused(ValueError):
    """Raised when the line names a dataset or agent that cannot be had."""


def dataset_named(namespace: Mapping[str, Any], given: str) -> Any:
    """The dataset ``given`` names: a notebook name holding one, or a saved file."""
    from cortex_jupyter.experiments.cases import Dataset

    if given.isidentifier() and given in namespace:
        found = namespace[given]
        if not isinstance(found, Dataset):
            raise ExperimentRefused(
                f"{given} is a {type(found).__name__}, not a Dataset "
                "(cortex_jupyter.Dataset([...]) or Dataset.load(path))"
            )
        return found
    path = os.path.expanduser(given)
    if os.path.exists(path):
        try:
            return Dataset.load(path)
        except (OSError, ValueError) as exc:
            raise ExperimentRefused(str(exc)) from None
    raise ExperimentRefused(
        f"no dataset {given!r:.80}: give a notebook name holding a Dataset, or the path of a "
        "saved one (.yaml, .yml, .jsonl)"
    )


def columns(
    session: Session,
    names: str,
    options_for: Callable[[str], CellOptions],
    option: str = "--agents",
) -> dict[str, Agent]:
    """The agent of each comma-separated column name (see the module docstring);
    ``option`` is how a refusal names the line's option (``%%cortex --compare`` too)."""
    found: dict[str, Agent] = {}
    for name in (part.strip() for part in names.split(",")):
        if not name:
            continue
        if name in found:
            raise ExperimentRefused(f"{option} names {name!r} twice")
        found[name] = _column(session, name, options_for)
    if not found:
        raise ExperimentRefused(f"{option} needs at least one name (a notebook Agent, a model...)")
    return found


def _column(session: Session, name: str, options_for: Callable[[str], CellOptions]) -> Agent:
    namespace = session.shell.user_ns
    if name.isidentifier() and isinstance(namespace.get(name), Agent):
        agent: Agent = namespace[name]
        if agent.model is None:
            base = cell_agent(
                "", options_for(""), session.registry, session.feeds, session.endpoints
            )
            agent = agent.with_options(model=base.model)
        return agent
    if name in session.registry.names("agent"):
        line = f"--agent {name}"
    else:
        dialect, sep, model = name.partition(":")
        if sep and dialect.lower() in _DIALECTS:
            line = f"--dialect {dialect} --model {model}"
        elif sep:
            raise ExperimentRefused(
                f"{name!r}: {dialect!r} is not a dialect ({', '.join(_DIALECTS)}); a column is a "
                "notebook Agent, a registered agent, a model, or dialect:model"
            )
        else:
            line = f"--model {name}"
    try:
        return cell_agent("", options_for(line), session.registry, session.feeds, session.endpoints)
    except Exception as exc:
        raise ExperimentRefused(f"column {name!r}: {exc}") from None
