"""Each action's own output: what a tool prints, logs and warns, and its progress.

In a kernel, ``print()`` from a tool lands in whichever cell is running, interleaved
across parallel tools, and after the cell ends in the next cell (NOTES.md). Here every
attempt of an action runs with its ``Capture`` in a context variable (worker threads get
a copy of the context, so sync tools are covered as well as async ones), and a router in
front of ``sys.stdout`` / ``sys.stderr``, a logging handler and ``warnings.showwarning``
send what is written inside that context to the capture instead of the cell. Outside
any action everything passes through untouched.

A capture keeps the text on its node (``node.stdout``, ``node.stderr``, ``node.logs``,
``node.progress``) and reports it as ``ActionOutput`` events, coalesced: writers only
leave what they wrote (printed text wakes nobody; logs and progress mark the capture
dirty), and the run's flusher, which looks at every capture while actions run, sends
what gathered at most ``FLUSH_HZ`` times a second. So a tool printing a thousand lines,
or reporting progress a hundred times a second, costs a few events, not thousands.

Nothing is redacted on a write: the text is joined and redacted a batch at a time when
it is flushed (``runtime.core.record.captured``), so a secret printed in two writes is redacted
whole, in the events, on the node, in the store and the transcript, and a printed
write costs what it costs into an ``io.StringIO``: ``sys.stdout.write`` inside an action
*is* the capture's C-level ``write`` (see ``_Router``). Bytes written to
``sys.stdout.buffer`` / ``sys.stderr.buffer`` inside an action are decoded (UTF-8)
onto the same capture: the binary buffer is the router's too.

``progress(done, total, note)`` is the public way for a tool to report progress; a
``tqdm`` bar inside a tool reports through it too instead of drawing its own widget.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import functools
import importlib
import importlib.abc
import importlib.machinery
import io
import logging
import operator
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from cortex_jupyter.runtime.core.events import ActionOutput, Progress
from cortex_jupyter.runtime.core.trust.secrets import head

if TYPE_CHECKING:
    from cortex_jupyter.runtime.core.record.graph import ActionNode

__all__ = ["FLUSH_HZ", "MAX_KEPT", "Capture", "capturing", "current", "install", "progress"]

#: Most ``ActionOutput`` events a second per action.
FLUSH_HZ = 20.0
#: Characters of stdout/stderr (each) and of log lines a node keeps; the rest is counted.
MAX_KEPT = 1 << 20

_current: contextvars.ContextVar[Capture | None] = contextvars.ContextVar(
    "cortex_capture", default=None
)
# The ``write`` of the running action's stdout and stderr (its node's ``CapturedText``),
# set with ``_current``: what a router's ``write`` is, inside an action.
_kept: dict[str, contextvars.ContextVar[Callable[[str], int]]] = {
    name: contextvars.ContextVar(f"cortex_capture_{name}") for name in ("stdout", "stderr")
}


def current() -> Capture | None:
    """The capture of the action running in this context, or None outside actions."""
    return _current.get()


def progress(done: float, total: float | None = None, note: str = "") -> None:
    """Report a running tool's progress: ``done`` out of ``total`` (``None``: unknown),
    with an optional ``note``. The action's node shows it live; ``node.progress`` keeps
    the last report. Outside an action (a tool called directly) it does nothing."""
    capture = _current.get()
    if capture is not None:
        capture.progress(done, total, note)


class Capture:
    """What one action wrote, kept on its node and reported through ``wake``.

    ``wake()`` asks the run to flush soon (the scheduler passes a thread-safe function);
    ``flush()`` (on the run's loop) returns the ``ActionOutput`` event of what gathered
    since the last flush, or None; ``flush(final=True)`` when the action ends also sends
    what a batch held back (the beginning of what may be a secret).

    Printed text is the hot path (a tool may print 100,000 lines): a print inside an
    action writes straight into the node's ``CapturedText`` (its sink, a C-level
    ``io.StringIO`` write: no lock, no Python frame, no redaction, no wake: the flusher
    looks at every capture ``FLUSH_HZ`` times a second while actions run, ``pending``).
    The flusher takes what gathered, cut at ``MAX_KEPT`` (the rest counted), joined and
    redacted. ``write()`` (text handed over by other code: a worker's batches, decoded
    bytes) also marks the capture dirty and wakes the flusher. Log lines, progress and
    partial values take the lock.
    """

    def __init__(self, node: ActionNode, wake: Callable[[], None]) -> None:
        self.node = node
        self._wake = wake
        self._lock = threading.Lock()
        self._logs: list[str] = []
        self._progress: Progress | None = None
        self._partial: str | None = None
        self.dirty = False
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}
        # What the node holds already (an earlier attempt's output counts too) and how
        # much of it was reported.
        self._logs_kept = sum(map(len, node.logs))
        node.captured_stdout.limit = node.captured_stderr.limit = MAX_KEPT

    # ---- writers (any thread) --------------------------------------------------------

    def write(self, stream: str, text: str) -> None:
        """``text`` written to ``stream`` (what a router does inline, and wakes the
        flusher too)."""
        if not isinstance(text, str):  # (what a text stream says: the flush joins text)
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text:
            return
        kept = self.node.captured_stdout if stream == "stdout" else self.node.captured_stderr
        kept.write(text)
        if not self.dirty:
            self.dirty = True
            self._wake()

    def write_bytes(self, stream: str, data: bytes) -> None:
        """Bytes written to ``stream``'s binary buffer: decoded as UTF-8 (a character cut
        between two writes is joined; an invalid byte is shown as U+FFFD), then text."""
        with self._lock:
            decoder = self._decoders.get(stream)
            if decoder is None:
                decoder = self._decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
            text = decoder.decode(data)
        self.write(stream, text)

    def log(self, line: str) -> None:
        with self._lock:
            line = head(line, self._room("logs", self._logs_kept, len(line)))
            if line:
                self._logs_kept += len(line)
                self.node.logs.append(line)
                self._logs.append(line)
            news = self._mark()
        self._tell(news)

    def progress(self, done: float, total: float | None, note: str) -> None:
        report = Progress(float(done), None if total is None else float(total), str(note))
        with self._lock:
            self.node.progress = report
            self._progress = report
            news = self._mark()
        self._tell(news)

    def partial(self, summary: str) -> None:
        with self._lock:
            self._partial = summary
            news = self._mark()
        self._tell(news)

    def _room(self, stream: str, have: int, size: int) -> int:
        """How many of ``size`` new characters fit under ``MAX_KEPT`` (under the lock);
        the rest is counted in ``node.dropped``."""
        room = max(MAX_KEPT - have, 0)
        if size > room:
            dropped = self.node.dropped
            dropped[stream] = dropped.get(stream, 0) + size - room
        return room

    def _mark(self) -> bool:
        """Marks the capture dirty (under the lock); True when it was clean."""
        news = not self.dirty
        self.dirty = True
        return news

    def _tell(self, news: bool) -> None:
        """Wakes the flusher, never under the lock: ``flush()`` takes that lock on the
        run's loop, so a wake that waited for the loop while holding it would hang both."""
        if news:
            self._wake()

    # ---- the flusher (the run's loop) ------------------------------------------------

    def pending(self) -> bool:
        """Whether something gathered since the last flush (a writer in a hurry appends
        to a stream that has news without marking the capture again)."""
        node = self.node
        return self.dirty or node.captured_stdout.pending() or node.captured_stderr.pending()

    def flush(self, *, final: bool = False) -> ActionOutput | None:
        if not (final or self.pending()):
            return None
        self.dirty = False  # before reading: a write after this point marks it again
        with self._lock:
            logs, progress, partial = tuple(self._logs), self._progress, self._partial
            self._logs = []
            self._progress = self._partial = None
        stdout, stderr = self._take("stdout", final), self._take("stderr", final)
        if not (stdout or stderr or logs or progress or partial):
            return None
        return ActionOutput(
            self.node.id,
            time.monotonic(),
            stdout=stdout,
            stderr=stderr,
            logs=logs,
            progress=progress,
            partial=partial,
            parent=self.node.parent,
        )

    def _take(self, stream: str, final: bool) -> str:
        kept = self.node.captured_stdout if stream == "stdout" else self.node.captured_stderr
        taken = kept.take(end=final)
        if kept.dropped:
            self.node.dropped[stream] = kept.dropped
        return taken


def carried(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func``, run (in any thread) with this context's capture: what a tool's own
    threads and thread pools run (``_hand_on``). Outside actions, ``func`` itself."""
    capture = _current.get()
    if capture is None:
        return func

    def run_in_the_action(*args: Any, **kwargs: Any) -> Any:
        with capturing(capture):
            return func(*args, **kwargs)

    return run_in_the_action


@contextlib.contextmanager
def capturing(capture: Capture) -> Iterator[Capture]:
    """Run the body (one attempt of an action) with ``capture`` as this context's."""
    install()
    node = capture.node
    token = _current.set(capture)
    out = _kept["stdout"].set(node.captured_stdout.write)
    err = _kept["stderr"].set(node.captured_stderr.write)
    try:
        yield capture
    finally:
        _kept["stderr"].reset(err)
        _kept["stdout"].reset(out)
        _current.reset(token)


# ---- the routers -----------------------------------------------------------------------


class _Router(io.TextIOBase):
    """Stands in for ``sys.stdout`` / ``sys.stderr``: inside an action, writes go to its
    capture; everywhere else to the stream it wraps (which it imitates otherwise)."""

    def __init__(self, inner: TextIO, name: str) -> None:
        super().__init__()
        self.inner = inner
        self.stream_name = name

    # ``sys.stdout.write`` is this context's: inside an action, its ``CapturedText``'s
    # ``write`` (an ``io.StringIO``'s, so a print costs about what it costs into one);
    # outside, the router itself, called (``__call__``: to the wrapped stream), or what
    # was set in its place (IPython sets ``sys.stdout.write`` to its tee for each cell;
    # inside actions the capture still takes the text, which is not the cell's output).
    # Found with C calls only, no Python frame on every write of every print: the
    # property is ``_kept[name].get`` with the router as its default (``_Routers.plain``)
    # or, while something was set, ``self._route()``: ``_kept[name].get`` with that as
    # its default (``_Routers.set``).
    write: Any
    _route: Callable[[], Callable[[str], int]]

    def __call__(self, text: str) -> int:
        """``write`` outside actions: to the wrapped stream. Kept and called later inside
        an action (``write = sys.stdout.write`` at a module's import), to its capture."""
        write = _kept[self.stream_name].get(None)
        if write is not None:
            return write(text)
        return self.inner.write(text)

    def _set_write(self, value: Callable[[str], int]) -> None:
        routers = _ROUTERS[self.stream_name]
        if value is self:  # what ``write`` was outside actions, put back
            self.__class__ = routers.plain
            return
        if isinstance(value, _SetWrite):  # (a nested tee putting back the one before)
            value = value.write
        outside = _SetWrite(value, self.stream_name)
        self._route = functools.partial(_kept[self.stream_name].get, outside)
        self.__class__ = routers.set

    def _del_write(self) -> None:
        self.__class__ = _ROUTERS[self.stream_name].plain

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if _current.get() is None:
            self.inner.flush()

    def isatty(self) -> bool:
        return bool(self.inner.isatty())

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.inner, "encoding", None) or "utf-8")

    @property
    def buffer(self) -> _BytesRouter:
        """The binary buffer: inside an action its bytes go to the capture (decoded), as
        text does; outside, to the wrapped stream's own buffer. A stream without one
        (ipykernel's) has none outside actions, as before."""
        if _current.get() is None and not hasattr(self.inner, "buffer"):
            raise AttributeError(f"{type(self.inner).__name__!r} object has no attribute 'buffer'")
        return _BytesRouter(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _SetWrite:
    """``sys.stdout.write`` outside actions while something else was set in its place
    (IPython's output-history tee): that, or when it was kept and is called inside an
    action (``write = sys.stdout.write`` in a module a cell imported), the action's
    capture (the tee would keep the text in the cell's output history)."""

    __slots__ = ("stream_name", "write")

    def __init__(self, write: Callable[[str], int], stream_name: str) -> None:
        self.write = write
        self.stream_name = stream_name

    def __call__(self, text: str, *args: Any, **kwargs: Any) -> int:
        write = _kept[self.stream_name].get(None)
        if write is None:
            return self.write(text, *args, **kwargs)
        return write(text)


class _Routers(NamedTuple):
    plain: type[_Router]  # ``write`` as the router has it
    set: type[_Router]  # ``write`` set to something else outside actions


def _routers(name: str) -> _Routers:
    here = _kept[name].get
    setter, deleter = _Router._set_write, _Router._del_write
    plain = property(here, setter, deleter)
    routed = property(operator.methodcaller("_route"), setter, deleter)
    return _Routers(
        type(f"_{name.title()}Router", (_Router,), {"write": plain, "__slots__": ()}),
        type(f"_{name.title()}RouterSet", (_Router,), {"write": routed, "__slots__": ()}),
    )


_ROUTERS = {name: _routers(name) for name in ("stdout", "stderr")}


class _BytesRouter(io.BufferedIOBase):
    """``sys.stdout.buffer`` while the routers are in place (see ``_Router.buffer``)."""

    def __init__(self, router: _Router) -> None:
        super().__init__()
        self._router = router

    def write(self, data: Any) -> int:
        capture = _current.get()
        if capture is None:
            return int(self._router.inner.buffer.write(data))
        raw = bytes(data)
        capture.write_bytes(self._router.stream_name, raw)
        return len(raw)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        if _current.get() is None:
            self._router.inner.buffer.flush()

    def fileno(self) -> int:
        return self._router.fileno()

    def isatty(self) -> bool:
        return self._router.isatty()


class _LogRouter(logging.Handler):
    """Takes the log records emitted inside an action (formatted, onto its capture).

    Outside actions, when the root logger has no handler of its own, it does what
    logging's last resort would have done (warnings and worse to ``sys.stderr``), so
    installing it changes nothing there.
    """

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        capture = _current.get()
        if capture is not None:
            try:
                capture.log(self.format(record))
            except Exception:
                self.handleError(record)
            return
        root = logging.getLogger()
        alone = all(h is self for h in root.handlers)
        if alone and record.levelno >= logging.WARNING and logging.lastResort is not None:
            logging.lastResort.handle(record)


def _not_in_an_action(record: logging.LogRecord) -> bool:
    """A filter for the root logger's other handlers: an action's records are its own."""
    return _current.get() is None


_original_showwarning = warnings.showwarning


def _showwarning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    capture = _current.get()
    if capture is None:
        _original_showwarning(message, category, filename, lineno, file, line)
        return
    capture.log(f"{category.__name__}: {message} ({filename}:{lineno})")


_install_lock = threading.Lock()
_log_router = _LogRouter()


def install() -> None:
    """Put the routers in place (idempotent; again after something replaced a stream)."""
    with _install_lock:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, _Router):
                setattr(sys, name, _ROUTERS[name].plain(stream, name))
        root = logging.getLogger()
        if _log_router not in root.handlers:
            root.addHandler(_log_router)
        for handler in root.handlers:
            if handler is not _log_router and _not_in_an_action not in handler.filters:
                handler.addFilter(_not_in_an_action)
        if warnings.showwarning is not _showwarning:
            warnings.showwarning = _showwarning
        _hand_on()
        _watch_tqdm()


# ---- a tool's own threads -------------------------------------------------------------------


class _Handed(NamedTuple):
    start: Callable[[threading.Thread], None]
    submit: Callable[..., Any]


_handed: list[_Handed] = []


def _hand_on() -> None:
    """A thread a tool starts (``threading.Thread``) runs in the tool's action, and so
    does a task it gives a ``ThreadPoolExecutor``: what they print is the action's (its
    node, redacted), not the cell's. A pool's threads are started outside any action (a
    pool outlives the action that first used it: each task is in the action that gave
    it, or in none). Threads started outside actions are left as they are."""
    if _handed:
        return
    from concurrent.futures import ThreadPoolExecutor

    start, submit = threading.Thread.start, ThreadPoolExecutor.submit
    _handed.append(_Handed(start, submit))

    def start_in_the_action(self: threading.Thread) -> None:
        if _current.get() is not None:
            self.run = carried(self.run)  # type: ignore[method-assign]
        start(self)

    def submit_in_the_action(self: Any, fn: Callable[..., Any], /, *args: Any, **kw: Any) -> Any:
        if _current.get() is None:
            return submit(self, fn, *args, **kw)
        return contextvars.Context().run(submit, self, carried(fn), *args, **kw)

    threading.Thread.start = start_in_the_action  # type: ignore[method-assign]
    ThreadPoolExecutor.submit = submit_in_the_action  # type: ignore[method-assign]


# ---- tqdm ---------------------------------------------------------------------------------


@dataclass
class _TqdmHooks:
    patched: bool = False


_tqdm = _TqdmHooks()


class _TqdmFinder(importlib.abc.MetaPathFinder):
    """Patches tqdm the moment it is imported (a tool usually imports it inside itself,
    after its action started), so its first bar already reports as progress."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in ("tqdm.std", "tqdm.notebook"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            sys.modules[name] = module
            if name == "tqdm.notebook" and _tqdm.patched:
                _patch_tqdm_notebook(module, sys.modules["tqdm.std"].tqdm)
            else:
                _patch_tqdm()

        loader.exec_module = exec_module
        return spec


_finder = _TqdmFinder()


def _watch_tqdm() -> None:
    if "tqdm.std" in sys.modules:
        _patch_tqdm()
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def _patch_tqdm() -> None:
    """Make tqdm bars created inside an action report as its progress (no bar drawn, no
    widget shown); bars outside actions are left as they are."""
    if _tqdm.patched or "tqdm.std" not in sys.modules:
        return
    try:
        std: Any = importlib.import_module("tqdm.std")
    except Exception:  # a broken or foreign "tqdm" module: leave it alone
        return
    _tqdm.patched = True
    base = std.tqdm
    original_init = base.__init__
    original_display = base.display
    original_close = base.close

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        capture = _current.get()
        if capture is not None:
            kwargs["file"] = io.StringIO()  # drawn nowhere
            kwargs.setdefault("mininterval", 0.05)
        original_init(self, *args, **kwargs)
        self._cortex_capture = capture

    def display(self: Any, *args: Any, **kwargs: Any) -> Any:
        capture = getattr(self, "_cortex_capture", None)
        if capture is None:
            return original_display(self, *args, **kwargs)
        capture.progress(self.n, self.total, self.desc or "")
        return None

    def close(self: Any) -> None:
        capture = getattr(self, "_cortex_capture", None)
        if capture is not None and not self.disable:
            capture.progress(self.n, self.total, self.desc or "")
        original_close(self)

    base.__init__ = __init__
    base.display = display
    base.close = close
    notebook = sys.modules.get("tqdm.notebook")
    if notebook is not None:
        _patch_tqdm_notebook(notebook, base)


def _patch_tqdm_notebook(notebook: Any, base: Any) -> None:
    """``tqdm.notebook`` (what ``tqdm.auto`` gives in Jupyter) builds and displays a widget
    in ``__init__``: inside an action it becomes a plain (patched) std bar instead."""
    cls = notebook.tqdm_notebook
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if _current.get() is None:
            original(self, *args, **kwargs)
            return
        base.__init__(self, *args, **kwargs)
        self.displayed = True
        self.container = None
        self.disp = lambda *a, **k: base.display(self, *a, **k)

    cls.__init__ = __init__
    for name in ("display", "close", "reset", "clear"):
        if name in cls.__dict__:
            method = cls.__dict__[name]

            def routed(self: Any, *args: Any, _method: Any = method, _name: str = name, **kw: Any):  # type: ignore[no-untyped-def]
                if getattr(self, "_cortex_capture", None) is not None:
                    return getattr(base, _name)(self, *args, **kw)
                return _method(self, *args, **kw)

            setattr(cls, name, routed)
