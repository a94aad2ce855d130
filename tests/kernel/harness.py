"""A real IPython kernel driven through ``jupyter_client``, recording every iopub message.

Used by ``tests/kernel`` and by ``bench/kernel_bench.py``; it imports nothing from pytest.
The kernel is this interpreter (the venv's), from a kernelspec written into a private
directory, with its own IPython and Jupyter dirs: nothing of the user's config is read.

Each iopub message is kept with its arrival time (``time.monotonic()`` in this process) and
its size: the JSON length of header, parent header, metadata and content, plus its buffers.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

KERNEL_NAME = "cortex-test-venv"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: The message types a widget view sends: its widgets' comms and its display.
VIEW_TYPES = frozenset(
    ("comm_open", "comm_msg", "comm_close", "display_data", "update_display_data")
)


@dataclass
class Message:
    """One iopub message as it arrived."""

    type: str
    content: dict[str, Any]
    metadata: dict[str, Any]
    time: float
    size: int
    raw: dict[str, Any] = field(repr=False)

    @property
    def sent(self) -> float:
        """When the kernel made the message (its header's date, in seconds): what the
        view's message budget governs. Arrival times bunch up when this test process
        waits for a core, so rates are measured on these."""
        date = self.raw["header"]["date"]
        if isinstance(date, str):
            date = datetime.fromisoformat(date)
        return float(date.timestamp())

    @property
    def comm_id(self) -> str | None:
        comm_id = self.content.get("comm_id")
        return comm_id if isinstance(comm_id, str) else None

    @property
    def state(self) -> dict[str, Any]:
        """The widget state a ``comm_open`` / ``comm_msg`` update carries (else ``{}``)."""
        data = self.content.get("data") or {}
        state = data.get("state") if isinstance(data, dict) else None
        return state if isinstance(state, dict) else {}


@dataclass
class Execution:
    """One ``execute_request``: its reply and every iopub message it caused."""

    code: str
    reply: dict[str, Any]
    messages: list[Message]
    sent: float
    replied: float
    #: iopub messages that arrived meanwhile with another parent (not in ``messages``)
    foreign: int = 0

    @property
    def status(self) -> str:
        return str(self.reply.get("status"))

    def of(self, *types: str) -> list[Message]:
        return [m for m in self.messages if m.type in types]

    def stream(self, name: str) -> str:
        return "".join(m.content["text"] for m in self.of("stream") if m.content["name"] == name)

    def view_messages(self) -> list[Message]:
        return [m for m in self.messages if m.type in VIEW_TYPES]

    def widget_classes(self) -> dict[str, str]:
        """comm id -> the CSS classes its widget was given (opens and later updates)."""
        classes: dict[str, str] = {}
        for message in self.of("comm_open", "comm_msg"):
            names = message.state.get("_dom_classes")
            if names and message.comm_id is not None:
                classes[message.comm_id] = " ".join(names)
        return classes

    def values(self, comm_id: str | None) -> list[tuple[float, str]]:
        """``(arrival time, value)`` for every ``value`` a widget was sent."""
        return [
            (m.time, m.state["value"])
            for m in self.of("comm_open", "comm_msg")
            if m.comm_id == comm_id and isinstance(m.state.get("value"), str)
        ]

    def comm_of_class(self, css_class: str) -> str | None:
        for comm_id, names in self.widget_classes().items():
            if css_class in names.split():
                return comm_id
        return None

    def descendants(self, comm_id: str | None) -> set[str]:
        """The comm ids of a widget and every widget ever among its (nested) children."""
        children: dict[str, set[str]] = {}
        for message in self.of("comm_open", "comm_msg"):
            kids = message.state.get("children")
            if message.comm_id is not None and isinstance(kids, list):
                found = children.setdefault(message.comm_id, set())
                found.update(kid.removeprefix("IPY_MODEL_") for kid in kids)
        seen: set[str] = set()
        todo = [] if comm_id is None else [comm_id]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(children.get(current, ()))
        return seen

    def part_values(self, css_class: str) -> list[tuple[float, str]]:
        """``(time, value)`` sent to the widget with ``css_class`` or any widget inside it."""
        inside = self.descendants(self.comm_of_class(css_class))
        return [
            (m.time, m.state["value"])
            for m in self.of("comm_open", "comm_msg")
            if m.comm_id in inside and isinstance(m.state.get("value"), str)
        ]

    def total_bytes(self, messages: Iterable[Message] | None = None) -> int:
        return sum(m.size for m in (self.messages if messages is None else messages))


#: Run in the kernel: from then on, every message a widget view sends is logged with the
#: time its view's message budget charged it, the clock reading of the budget's last
#: ``refill`` (a redraw charges what it sends at the time it started), or ``None`` when
#: the final frame sent it (``WidgetOutput.close``: the final frame and the two displays
#: are outside the budget). The header's date says when a message was *made*, which on a
#: loaded machine is later than when the budget charged it by however long the redraw
#: took; the budget is checked in its own terms. ``Kernel.charges`` reads the log.
CHARGE_LOG = """
def _cortex_log_charges():
    from cortex_jupyter.display import pieces
    from cortex_jupyter.session import views

    log, now = [], {"at": None, "final": False}
    refill, close = pieces.Budget.refill, views.WidgetOutput.close
    session = get_ipython().kernel.session
    send = session.send

    def charged_refill(self, at):
        refill(self, at)
        now["at"] = at

    def final_close(self):
        now["final"] = True
        try:
            close(self)
        finally:
            now["final"] = False

    def logged_send(stream, msg_or_type, *args, **kwargs):
        kind = msg_or_type if isinstance(msg_or_type, str) else msg_or_type["msg_type"]
        if kind in VIEW_TYPES:
            log.append((kind, None if now["final"] else now["at"]))
        return send(stream, msg_or_type, *args, **kwargs)

    pieces.Budget.refill, views.WidgetOutput.close = charged_refill, final_close
    session.send = logged_send
    return log

_cortex_charges = _cortex_log_charges()
""".replace("VIEW_TYPES", repr(sorted(VIEW_TYPES)))


def max_per_window(times: Iterable[float], window: float = 1.0) -> int:
    """The most events in any window of ``window`` seconds (sliding, starting at an event)."""
    ordered = sorted(times)
    best = 0
    end = 0
    for start, at in enumerate(ordered):
        while end < len(ordered) and ordered[end] < at + window:
            end += 1
        best = max(best, end - start)
    return best


def message_size(msg: dict[str, Any]) -> int:
    """JSON length of header, parent header, metadata and content, plus buffer bytes."""
    parts = [msg.get(key, {}) for key in ("header", "parent_header", "metadata", "content")]
    text = sum(len(json.dumps(part, default=str, separators=(",", ":"))) for part in parts)
    return text + sum(len(memoryview(buffer).cast("B")) for buffer in msg.get("buffers") or [])


def private_environment(base: Path, **extra: str) -> dict[str, str]:
    """This process's environment with none of the user's Jupyter or IPython settings:
    their config, data and runtime directories under ``base``; then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON"))}
    env.update(
        IPYTHONDIR=str(base / "ipython"),
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


class Kernel:
    """An ipykernel of this interpreter, started in a private directory (``base``)."""

    def __init__(self, base: Path | None = None) -> None:
        self._own_base = base is None
        self.base = Path(tempfile.mkdtemp(prefix="cortex-kernel-")) if base is None else base
        self.km: KernelManager | None = None
        self.kc: BlockingKernelClient | None = None

    # ---- life cycle ---------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        return private_environment(
            self.base,
            JUPYTER_PLATFORM_DIRS="1",
            CORTEX_JUPYTER_DATA_DIR=str(self.base / "cortex-data"),
        )

    def start(self, timeout: float = 60.0) -> Kernel:
        kernels = self.base / "kernels"
        spec_dir = kernels / KERNEL_NAME
        spec_dir.mkdir(parents=True, exist_ok=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "cortex_jupyter tests (this venv)",
            "language": "python",
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec))
        (self.base / "work").mkdir(exist_ok=True)
        specs = KernelSpecManager(kernel_dirs=[str(kernels)])
        self.km = KernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=specs,
            connection_file=str(self.base / "kernel-connection.json"),
        )
        self.km.start_kernel(env=self.environment(), cwd=str(self.base / "work"))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=timeout)
        return self

    def stop(self) -> None:
        kc, km = self.kc, self.km
        self.kc = self.km = None
        if kc is not None:
            kc.stop_channels()
        if km is not None and km.has_kernel:
            km.shutdown_kernel(now=False)
        if self._own_base:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Kernel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        assert self.km is not None and self.km.provisioner is not None
        pid = getattr(self.km.provisioner, "pid", None)
        assert isinstance(pid, int), "the kernel's provisioner does not know its pid"
        return pid

    def interrupt(self) -> None:
        assert self.km is not None
        self.km.interrupt_kernel()

    # ---- running code -------------------------------------------------------------

    def execute(
        self,
        code: str,
        *,
        user_expressions: dict[str, str] | None = None,
        timeout: float = 60.0,
        on_message: Callable[[Message], None] | None = None,
        allow_error: bool = False,
        cell_id: str | None = None,
    ) -> Execution:
        """Run ``code``; collect its iopub messages until the kernel is idle, and its reply.

        ``on_message`` sees each message as it arrives (e.g. to interrupt the kernel). A
        reply whose status is not ``ok`` raises ``AssertionError`` unless ``allow_error``.
        ``cell_id`` is sent as JupyterLab sends it: ``cellId`` in the request's metadata.
        """
        kc = self.kc
        assert kc is not None, "the kernel is not started"
        sent = time.monotonic()
        if cell_id is None:
            msg_id = kc.execute(code, user_expressions=user_expressions or {}, allow_stdin=False)
        else:
            content = {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": user_expressions or {},
                "allow_stdin": False,
                "stop_on_error": True,
            }
            request = kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
            kc.shell_channel.send(request)
            msg_id = request["header"]["msg_id"]
        deadline = sent + timeout
        messages: list[Message] = []
        foreign = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no idle status within {timeout} s for:\n{code[:200]}")
            try:
                raw = kc.get_iopub_msg(timeout=remaining)
            except queue.Empty:
                continue
            arrived = time.monotonic()
            if raw["parent_header"].get("msg_id") != msg_id:
                foreign += 1
                continue
            message = Message(
                type=raw["msg_type"],
                content=raw["content"],
                metadata=raw.get("metadata") or {},
                time=arrived,
                size=message_size(raw),
                raw=raw,
            )
            messages.append(message)
            if on_message is not None:
                on_message(message)
            if message.type == "status" and message.content["execution_state"] == "idle":
                break
        while True:
            reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        execution = Execution(code, reply["content"], messages, sent, time.monotonic(), foreign)
        if not allow_error and execution.status != "ok":
            content = execution.reply
            raise AssertionError(
                f"the cell failed: {content.get('ename')}: {content.get('evalue')}\n"
                + "\n".join(content.get("traceback", []))
                + f"\nstderr: {execution.stream('stderr')}\ncode:\n{code[:400]}"
            )
        return execution

    def charges(self) -> list[tuple[str, float | None]]:
        """The log ``CHARGE_LOG`` keeps (run it first): ``(message type, charged at)``."""
        found = self.execute("", user_expressions={"log": "_cortex_charges"}).reply
        text = found["user_expressions"]["log"]["data"]["text/plain"]
        return [(kind, at) for kind, at in ast.literal_eval(text)]

    def listen(
        self, timeout: float, until: Callable[[Message], bool] | None = None
    ) -> list[Message]:
        """iopub messages of any parent for ``timeout`` seconds, or until one for which
        ``until`` holds (included): what a kernel sends while no cell runs."""
        kc = self.kc
        assert kc is not None, "the kernel is not started"
        deadline = time.monotonic() + timeout
        messages: list[Message] = []
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                raw = kc.get_iopub_msg(timeout=remaining)
            except queue.Empty:
                break
            message = Message(
                type=raw["msg_type"],
                content=raw["content"],
                metadata=raw.get("metadata") or {},
                time=time.monotonic(),
                size=message_size(raw),
                raw=raw,
            )
            messages.append(message)
            if until is not None and until(message):
                break
        return messages

    def send_comm(self, comm_id: str, content: Any, timeout: float = 10.0) -> list[Message]:
        """Send a widget a custom message as its front end does (a click in the page);
        returns the iopub messages that caused, up to the kernel's idle status."""
        kc = self.kc
        assert kc is not None, "the kernel is not started"
        data = {"method": "custom", "content": content}
        msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]

        def ours(message: Message) -> bool:
            return bool(message.raw["parent_header"].get("msg_id") == msg_id)

        def idle(message: Message) -> bool:
            return ours(message) and message.content.get("execution_state") == "idle"

        return [m for m in self.listen(timeout, until=idle) if ours(m)]

    def evaluate(self, expression: str) -> str:
        """The ``text/plain`` repr of ``expression`` in the kernel (via ``user_expressions``)."""
        result = self.execute("", user_expressions={"value": expression}).reply
        value = result["user_expressions"]["value"]
        assert value["status"] == "ok", value
        text: str = value["data"]["text/plain"]
        return text
