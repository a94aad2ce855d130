"""cortex_jupyter: build and test LLM agents in Jupyter notebooks.

``%load_ext cortex_jupyter`` registers the ``%%cortex`` cell magic. The package
imports nothing heavy at import time: IPython is imported only when the extension
is loaded, and the protocol API is re-exported lazily.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from cortex_jupyter.evaluation import Task, evaluate
    from cortex_jupyter.experiments import Case, Dataset, Experiment, expect
    from cortex_jupyter.models import OpenAIModel
    from cortex_jupyter.protocol import Parser
    from cortex_jupyter.runtime import (
        Agent,
        Registry,
        Run,
        RunSpec,
        Scheduler,
        default_registry,
        progress,
        tool,
    )
    from cortex_jupyter.store import open_run, runs

from cortex_jupyter._version import __version__

__all__ = [
    "Agent",
    "Case",
    "Dataset",
    "Experiment",
    "OpenAIModel",
    "Parser",
    "Registry",
    "Run",
    "RunSpec",
    "Scheduler",
    "Task",
    "__version__",
    "default_registry",
    "evaluate",
    "expect",
    "expose",
    "hide",
    "load_ipython_extension",
    "open_run",
    "progress",
    "runs",
    "tool",
    "unload_ipython_extension",
]

# Public names, imported on first use so ``import cortex_jupyter`` stays light.
_LAZY = {
    "Agent": "cortex_jupyter.runtime",
    "Case": "cortex_jupyter.experiments",
    "Dataset": "cortex_jupyter.experiments",
    "Experiment": "cortex_jupyter.experiments",
    "expect": "cortex_jupyter.experiments",
    "OpenAIModel": "cortex_jupyter.models",
    "Parser": "cortex_jupyter.protocol",
    "Registry": "cortex_jupyter.runtime",
    "Run": "cortex_jupyter.runtime",
    "RunSpec": "cortex_jupyter.runtime",
    "Scheduler": "cortex_jupyter.runtime",
    "Task": "cortex_jupyter.evaluation",
    "default_registry": "cortex_jupyter.runtime",
    "evaluate": "cortex_jupyter.evaluation",
    "open_run": "cortex_jupyter.store",
    "progress": "cortex_jupyter.runtime",
    "runs": "cortex_jupyter.store",
    "tool": "cortex_jupyter.runtime",
}


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Register the ``%%cortex`` magic (called by ``%load_ext cortex_jupyter``)."""
    from cortex_jupyter.magic import register

    register(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """Remove the ``%%cortex`` magic and close the MCP servers and the Dask cluster
    cortex started (called by ``%unload_ext cortex_jupyter``)."""
    from cortex_jupyter.commands import close_tool_sources
    from cortex_jupyter.magic import unregister

    unregister(ipython)
    close_tool_sources()


def expose(*names: str) -> None:
    """Let models reach these notebook names with ``$name`` (``%cortex expose``); glob
    patterns such as ``"df_*"`` work. IPython's own names and modules are never exposed:
    naming one raises ``ValueError`` saying why."""
    from cortex_jupyter.session import current_session

    refused = current_session("expose").names.expose(names)
    if refused:
        raise ValueError("; ".join(refused))


def hide(*names: str) -> None:
    """Take these names out of what models may reach (``%cortex hide``); glob patterns
    such as ``"data_*"`` hide every name they match, bound by runs or exposed. The latest
    ``expose`` or ``hide`` that matches a name decides for it."""
    from cortex_jupyter.session import current_session

    current_session("hide").names.hide(names)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
