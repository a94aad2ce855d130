"""What a running experiment shows: a progress bar with the time left, and in a notebook
the live matrix (``display.matrix.MatrixView``) that fills in as tries end; clicking a
cell shows that try's run, its action graph with the expectations laid over it.

This is the experiments package's one edge to the notebook (it may import IPython's
``display``, as the session does); everything it shows is made by ``display``.
"""

from __future__ import annotations

import sys
from typing import Any

from cortex_jupyter.experiments.results import Try
from cortex_jupyter.runtime.core.trust.secrets import redact, shorten

__all__ = ["Watching", "in_notebook"]


def in_notebook() -> bool:
    """Whether this is a Jupyter kernel with a front end that shows widgets."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover (IPython is a dependency)
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class Watching:
    """The progress bar and live matrix of one experiment run (see the module docstring):
    ``experiment`` is the ``Experiment`` being run (read, never changed here)."""

    def __init__(self, experiment: Any, *, progress: bool = True, view: bool | None = None):
        self.experiment = experiment
        pending = sum(1 for tried in experiment.tries if not tried.done)
        self.bar: Any = None
        if progress:
            import tqdm.auto  # type: ignore[import-untyped]

            self.bar = tqdm.auto.tqdm(
                total=pending, desc=f"experiment {experiment.name}", unit="try", dynamic_ncols=True
            )
        self.view: Any = None
        if view if view is not None else in_notebook():
            from IPython.display import display

            from cortex_jupyter.display.matrix import MatrixPanel

            panel = MatrixPanel(self.open)
            self.view = panel.view
            self.view.update(experiment.matrix())
            display(panel.box)

    def ended(self, tried: Try) -> None:
        if self.bar is not None:
            tries = self.experiment.tries
            passed = sum(t.passed for t in tries)
            done = sum(t.done for t in tries)
            self.bar.set_postfix_str(f"{passed}/{done} passed", refresh=False)
            self.bar.update(1)
        if self.view is not None:
            self.view.update(self.experiment.matrix())

    def idle(self) -> None:
        if self.view is not None:
            self.view.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.view is not None:
            from IPython.display import display

            self.view.update(self.experiment.matrix())
            self.view.flush()
            # The static copy under the live matrix (hidden while the widget shows), as a
            # finished run leaves: a saved notebook reads without a kernel.
            data, metadata = self.view.saved_bundle()
            display(data, raw=True, metadata=metadata)

    def open(self, case: str, agent: str, repeat: int, run_id: str | None) -> Any:
        """Show the try ``(case, agent, repeat)``: its run's graph and its verdicts."""
        from cortex_jupyter.display.matrix import try_view

        tried = next((t for t in self.experiment.tries if t.key == (case, agent, repeat)), None)
        if tried is None:
            return None
        try:
            run = self.experiment.open(case, agent, repeat)
        except Exception as exc:  # never ran, or the store cannot be read: say so
            title = f"{case} / {agent} #{repeat + 1}: {shorten(redact(str(exc)), 200)}"
            return try_view(None, tried.verdicts, title=title)
        return try_view(run, tried.verdicts, title=f"{case} / {agent} #{repeat + 1}")
