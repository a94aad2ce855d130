"""What a ``%%cortex --compare`` cell shows while its columns run: the columns' live
views side by side (widgets), or their text one after another at the end (``--text``).

Its own module for the reason ``views`` is: a view is touched only in the cell's thread
and lives by other rules than the runs. The bridge hands it the columns' events tagged
``(column, repeat, event)``; ``(column, repeat, None)`` says a column's next run starts.
Both views read a column's runs from the comparison (``session.compare.Comparison``).
"""

from __future__ import annotations

import sys
import time
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from IPython.display import display

from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.session.approvals import Approvals

if TYPE_CHECKING:
    from cortex_jupyter.display.compare_widget import CompareBox
    from cortex_jupyter.display.widget import WidgetView

#: ``session.compare``'s ``Comparison`` and ``Column`` (not imported: it imports this).
Comparison = Any
Column = Any


def _end(run: Any) -> float:
    return run.ended if run.ended is not None else time.monotonic()


def the_diff(comparison: Comparison) -> Any:
    """The comparison's diff (``display.compare_diff``) of each column's latest run;
    None with one column (nothing to diff)."""
    from cortex_jupyter.display.compare_diff import compare_diff

    columns = list(comparison.values())
    if len(columns) < 2:
        return None
    return compare_diff([(c.name, c.run, c.answer) for c in columns])


class CompareText:
    """``--text`` (or no widgets): nothing while the columns run (their streams would
    interleave line by line); at the end each column's run as text, one after another,
    the grouped answers of ``--repeat``, then the summary table."""

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison
        self.late: Callable[[list[Any]], None] | None = None
        self.stop: Callable[[], None] | None = None

    def deliver(self, events: list[Any]) -> None:
        return None

    def close(self) -> None:
        from cortex_jupyter.display import from_run, render_text
        from cortex_jupyter.display.compare import groups_text, summary_text

        out: list[str] = []
        for column in self.comparison.values():
            run = column.run
            if run is None:
                continue
            out.append(f"== {column.name} ==")
            state = from_run(run, model=column.model)
            out.append(render_text(state, _end(run), run.variables).rstrip("\n"))
            out.append("")
        if self.comparison.repeat > 1:
            out += [groups_text(self.comparison.groups), ""]
        diff = the_diff(self.comparison)
        if diff is not None:
            from cortex_jupyter.display.compare_diff import diff_text

            out += [diff_text(diff), ""]
        out.append(summary_text(self.comparison.facts()))
        sys.stdout.write(redact("\n".join(out)) + "\n")
        sys.stdout.flush()


class CompareWidgets:
    """The columns' live views in one box (``display.compare_widget``); at the end each
    view's final frame, and under the box the static copy of the whole comparison."""

    def __init__(
        self,
        comparison: Comparison,
        approvals: Approvals,
        scopes: Callable[[Column], Mapping[str, Any]],
        keep: Callable[[str], str] | None = None,
        cell: str | None = None,
        label: str = "",
    ) -> None:
        from cortex_jupyter.display.compare_widget import CompareBox

        #: Its notebook cell and label (``session.views.LiveViews`` keeps it).
        self.cell, self.label = cell, label
        self._metadata: dict[str, Any] | None = None
        self.comparison = comparison
        self._approvals = approvals
        self._scopes = scopes
        self.late: Callable[[list[Any]], None] | None = None
        self.stop: Callable[[], None] | None = None
        columns = list(comparison.values())
        self._repeat = [0] * len(columns)
        views = [self._view(column) for column in columns]
        self.box: CompareBox = CompareBox(
            views, [c.facts() for c in columns], diff=self._diff_html, keep=keep
        )
        self._handle = display(self.box.widget, display_id=True)
        self._closed = self._released = False

    def _view(self, column: Column) -> WidgetView:
        from cortex_jupyter.display.widget import WidgetView

        def decide(node_id: str, approved: bool) -> bool:  # this column's current run only
            run = column.run
            return run is not None and self._approvals.answer(run.id, node_id, approved)

        def values() -> Mapping[str, Any]:
            run = column.run
            own: dict[str, Any] = run.variables if run is not None else {}
            return ChainMap(own, dict(self._scopes(column)))

        return WidgetView(
            model=column.model, values=values, decide=decide, stop=self._stop,
            record=lambda: column.run,
        )  # fmt: skip

    def _diff_html(self) -> str:
        from cortex_jupyter.display.compare_diff import diff_html

        diff = the_diff(self.comparison)
        return "" if diff is None else diff_html(diff)

    def _stop(self) -> None:
        if self.stop is not None:
            self.stop()

    def deliver(self, events: list[Any]) -> bool:
        columns = list(self.comparison.values())
        batches: dict[int, list[Any]] = {}
        for index, repeat, event in events:
            if repeat != self._repeat[index]:  # a column's next run: a fresh view
                self._repeat[index] = repeat
                if batches.get(index):
                    self.box.views[index].apply(batches.pop(index))
                self.box.replace(index, self._view(columns[index]))
            if event is not None:
                batches.setdefault(index, []).append(event)
        behind = False
        for index, view in enumerate(self.box.views):
            if index in batches:
                view.apply(batches[index])
            behind = bool(view.redraw()) or behind
            self.box.header(index, columns[index].facts(state=view.state))
            self._show_repeats(index, columns[index])
        self.box.redraw_diff()
        return behind

    def _show_repeats(self, index: int, column: Column) -> None:
        """Under a ``--repeat`` column's view: its finished runs' answers, counted."""
        if self.comparison.repeat > 1:
            from cortex_jupyter.display.compare import column_groups_html

            finished = sum(run.status != "running" for run in column.runs)
            self.box.repeats(index, column_groups_html(column.groups, finished, column.repeats))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        from cortex_jupyter.display import from_run, static_html, static_text
        from cortex_jupyter.display.compare import compare_html, groups_html, groups_text
        from cortex_jupyter.display.static import SWITCH_CSS

        columns = list(self.comparison.values())
        for index, view in enumerate(self.box.views):
            view.stream_closed()
            view.finish()  # the final frame of the column's view
            self.box.header(index, columns[index].facts(state=view.state))
            self._show_repeats(index, columns[index])
        self.box.redraw_diff()
        parts, texts = [], []
        for column in columns:
            run = column.run
            if run is None:
                continue
            state = from_run(run, model=column.model)
            shown = ChainMap(run.variables, dict(self._scopes(column)))
            parts.append((column.facts(state=state), static_html(state, shown, _end(run))))
            texts.append(f"== {column.name} ==\n{static_text(state, _end(run), shown)}")
        groups = self.comparison.groups if self.comparison.repeat > 1 else {}
        from cortex_jupyter.display.compare import summary_text
        from cortex_jupyter.display.compare_diff import diff_html, diff_text

        diff = the_diff(self.comparison)
        under = groups_html(groups) + ("" if diff is None else diff_html(diff))
        html = compare_html(parts, under)
        texts += [groups_text(groups), "" if diff is None else diff_text(diff)]
        texts.append(summary_text(self.comparison.facts()))
        plain = redact("\n".join(texts))  # a column's name is the user's: maybe a key
        copy = {"text/html": f"<style>{SWITCH_CSS}</style>{html}", "text/plain": plain}
        display(copy, raw=True)
        if self._handle is not None:
            data = {**self.box.bundle(), "text/plain": ""}
            self._metadata = {"cortex": self.comparison.metadata()}
            self._handle.update(data, metadata=self._metadata, raw=True)

    # ---- kept live among the notebook's views (``session.views.LiveViews``) --------

    @property
    def states(self) -> list[Any]:
        """Each column's view state: a compare cell counts as one view a column."""
        return [view.state for view in self.box.views]

    @property
    def finished(self) -> bool:
        return self._closed

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> int:
        """Let the box go as a run's view lets go: its output keeps only the record (the
        static copy under it shows the comparison), then every widget closes."""
        if self._released:
            return 0
        self._released = True
        if self._handle is not None and self._metadata is not None:
            self._handle.update({"text/plain": ""}, metadata=self._metadata, raw=True)
        self._handle = None
        return self.box.close()
