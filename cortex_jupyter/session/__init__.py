"""The session: wires a notebook cell to model -> protocol -> runtime -> display.

A package of a few modules, each for one concern of a cell's run: ``cell`` (what a
cell asked for and which agent answers it), ``names`` (what a model may reach and what
runs bound), ``approvals`` (questions answered from the cell's thread), ``views`` (what
the cell shows), ``record`` (``_cortex`` and how a cell ends) and ``notebook`` (the
``Session`` that puts them together, one per kernel). The magic imports this package.
"""

from cortex_jupyter.session.approvals import Approvals
from cortex_jupyter.session.cell import CellOptions
from cortex_jupyter.session.notebook import Job, Session, current_session, forget, session_for
from cortex_jupyter.session.record import (
    CONTINUABLE,
    RUN_VARIABLE,
    UNFINISHED,
    CortexInterrupt,
    CortexRunError,
    NotebookRun,
)
from cortex_jupyter.session.views import LIVE_VIEWS, TextOutput, WidgetOutput

# The views' names before the session was a package: tests and bench/kernel_bench.py
# reach them here to wrap their methods.
_TextView = TextOutput
_WidgetView = WidgetOutput

__all__ = [
    "CONTINUABLE",
    "LIVE_VIEWS",
    "RUN_VARIABLE",
    "UNFINISHED",
    "Approvals",
    "CellOptions",
    "CortexInterrupt",
    "CortexRunError",
    "Job",
    "NotebookRun",
    "Session",
    "TextOutput",
    "WidgetOutput",
    "current_session",
    "forget",
    "session_for",
]
