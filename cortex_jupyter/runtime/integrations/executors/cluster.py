"""The session's Dask cluster: the one ``executor="dask"`` tools run on.

Why a module of its own: it is the session's one piece of state here, kept behind a
lock. A ``distributed.LocalCluster`` is started on first use (processes, one thread
each, one per core, no dashboard unless asked), or the client connects to the scheduler
at ``set_dask_address(...)`` / ``DASK_SCHEDULER_ADDRESS``. ``close_all`` ends what this
module started (the session's unload, and at exit); ``cluster_info`` is what
``%cortex cluster`` shows. The client subscribes to ``LIVE_TOPIC`` once, and routes each
live message to the call waiting for it (``live_messages``). Dask and distributed are
imported on first use, so a notebook without such tools never loads them.
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cortex_jupyter.runtime.integrations.executors.errors import ClusterUnavailable

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

__all__ = [
    "LIVE_TOPIC",
    "ClusterInfo",
    "LiveRoutes",
    "close_all",
    "cluster_info",
    "dask_client",
    "live_messages",
    "set_dask_address",
    "set_dask_dashboard",
]

#: The Dask event topic live output travels on (one for every call: the scheduler keeps
#: the last ``distributed.admin.low-level-log-length`` events of each topic).
LIVE_TOPIC = "cortex-jupyter-output"


@dataclass
class _DaskState:
    address: str | None = None  # set_dask_address
    dashboard: str | None = None  # set_dask_dashboard
    client: Client | None = None
    cluster: LocalCluster | None = None
    source: str = ""  # where the client's address came from
    connected_to: str | None = None  # the address the client was opened for (None: local)
    cluster_dashboard: bool = False  # the local cluster was started with one
    exit_hook: bool = False


_dask = _DaskState()
_dask_lock = threading.RLock()


def set_dask_address(address: str | None) -> None:
    """Use the Dask scheduler at ``address`` (``tcp://host:8786``) for ``executor="dask"``
    tools; ``None`` goes back to ``DASK_SCHEDULER_ADDRESS``, or else a local cluster.
    What this module had opened for another address is closed; the next call connects."""
    with _dask_lock:
        _dask.address = address or None
        if _dask.client is not None and _target()[0] != _dask.connected_to:
            close_all()


def set_dask_dashboard(address: str | None) -> None:
    """Give the local cluster started from now on a dashboard at ``address`` (``":8787"``,
    ``"127.0.0.1:0"``; it needs bokeh); ``None`` (the default): no dashboard."""
    with _dask_lock:
        _dask.dashboard = address or None


def dask_client() -> Client:
    """The session's Dask client: on first use it connects to the configured scheduler or
    starts a local cluster (blocking, a second or two). Closed by ``close_all()``."""
    with _dask_lock:
        client = _dask.client
        if client is not None and client.status not in ("closing", "closed"):
            return client
        close_all()
        address, source = _target()
        try:
            client = _connect(address)
        except Exception as exc:
            raise ClusterUnavailable(address, source, f"{type(exc).__name__}: {exc}") from exc
        _dask.client, _dask.source, _dask.connected_to = client, source, address
        # distributed leaves these methods unannotated (as it does Client, LocalCluster and
        # close below); its own signatures are stable: (topic, handler) here.
        client.subscribe_topic(LIVE_TOPIC, _live.route)  # type: ignore[no-untyped-call]
        if not _dask.exit_hook:
            atexit.register(close_all)
            _dask.exit_hook = True
        return client


def _target() -> tuple[str | None, str]:
    """The scheduler address to use and where it comes from (None: a local cluster)."""
    if _dask.address:
        return _dask.address, "set_dask_address"
    env = os.environ.get("DASK_SCHEDULER_ADDRESS")
    if env:
        return env, "DASK_SCHEDULER_ADDRESS"
    return None, "a local cluster started by cortex_jupyter"


def _connect(address: str | None) -> Client:
    from dask.system import CPU_COUNT
    from distributed import Client, LocalCluster

    if address is not None:
        return Client(address, set_as_default=False)  # type: ignore[no-untyped-call]
    _spawnable_main()
    # No dashboard unless asked: the scheduler's HTTP server (health, metrics) then
    # listens on a free port of this machine only, never 8787 (no "port in use" warning).
    http = {"dashboard_address": "127.0.0.1:0"} if _dask.dashboard is None else {}
    cluster = LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=CPU_COUNT,
        threads_per_worker=1,
        processes=True,
        dashboard_address=_dask.dashboard,
        # Retrying is the action's business (its `retry`), not Dask's: a task whose
        # worker died fails at once instead of killing three more workers.
        scheduler_kwargs={"allowed_failures": 0, **http},
    )
    try:
        client = Client(cluster, set_as_default=False)  # type: ignore[no-untyped-call]
    except BaseException:
        cluster.close()
        raise
    _dask.cluster, _dask.cluster_dashboard = cluster, _dask.dashboard is not None
    return client


def _spawnable_main() -> None:
    """Let worker processes be spawned from a notebook: multiprocessing reads
    ``__main__.__spec__``, the notebook's namespace is IPython's ``__main__`` module, and
    ``%reset`` deletes the name from it (the workers then fail to start with
    "module '__main__' has no attribute '__spec__'"). ``None`` is what it held."""
    main = sys.modules.get("__main__")
    if main is not None and not hasattr(main, "__spec__"):
        main.__spec__ = None


def close_all() -> None:
    """Close the Dask client and the local cluster this module started (the session's
    unload, and at exit); a cluster it only connected to keeps running. Calls still
    running there are cancelled. The next ``executor="dask"`` call starts again."""
    with _dask_lock:
        client, cluster = _dask.client, _dask.cluster
        _dask.client = _dask.cluster = None
        _dask.source, _dask.connected_to = "", None
    if client is not None:
        try:
            client.unsubscribe_topic(LIVE_TOPIC)  # type: ignore[no-untyped-call]
        finally:
            client.close()  # type: ignore[no-untyped-call]
    if cluster is not None:
        cluster.close()


@dataclass(frozen=True)
class ClusterInfo:
    """What ``%cortex cluster`` shows: the cluster ``executor="dask"`` tools run on."""

    address: str | None
    source: str
    workers: int = 0
    threads: int = 0
    memory: int = 0  # bytes, summed over the workers' limits
    dashboard: str | None = None
    error: str | None = None  # the scheduler could not be asked

    def __str__(self) -> str:
        if self.address is None:
            return f'no cluster yet: the first executor="dask" tool will use {self.source}'
        head = f"dask cluster at {self.address} ({self.source})"
        if self.error is not None:
            return f"{head}: not answering ({self.error})"
        from dask.utils import format_bytes

        workers = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        memory = format_bytes(self.memory)
        return (
            f"{head}: {workers}, {threads}, {memory} memory; dashboard: {self.dashboard or 'none'}"
        )


def cluster_info() -> ClusterInfo:
    """The cluster in use, or what the first ``executor="dask"`` tool will use ("no
    cluster yet"); never starts one."""
    with _dask_lock:
        client, cluster, source = _dask.client, _dask.cluster, _dask.source
    if client is None:
        address, source = _target()
        planned = f"the scheduler at {address} (from {source})" if address else source
        return ClusterInfo(None, planned)
    address = cluster.scheduler_address if cluster is not None else _dask.connected_to
    try:
        info = client.scheduler_info(n_workers=-1)
    except Exception as exc:
        return ClusterInfo(address, source, error=f"{type(exc).__name__}: {exc}")
    workers = list(info.get("workers", {}).values())
    dashboard: str | None = None
    if cluster is None or _dask.cluster_dashboard:
        try:
            dashboard = client.dashboard_link
        except Exception:
            dashboard = None
    return ClusterInfo(
        address,
        source,
        workers=len(workers),
        threads=sum(int(w.get("nthreads", 0)) for w in workers),
        memory=sum(int(w.get("memory_limit") or 0) for w in workers),
        dashboard=dashboard,
    )


# ---- live messages from the workers ----------------------------------------------------------


class LiveRoutes:
    """Live messages from the workers, each routed by one of its fields (``field``) to
    the inbox waiting for it: ``route`` is the Dask client's handler for the topic;
    ``add`` and ``drop`` (or ``messages``, around the wait) are the waiting side's."""

    def __init__(self, field: str) -> None:
        self.field = field
        self._inboxes: dict[str, queue.SimpleQueue[tuple[str, Any]]] = {}

    def add(self, key: str, inbox: queue.SimpleQueue[tuple[str, Any]]) -> None:
        """From now on, the messages whose ``field`` is ``key`` go into ``inbox`` (as
        ``("live", message)``)."""
        self._inboxes[key] = inbox

    def drop(self, key: str) -> None:
        self._inboxes.pop(key, None)

    @contextmanager
    def messages(self, key: str, inbox: queue.SimpleQueue[tuple[str, Any]]) -> Iterator[None]:
        """While inside, the messages for ``key`` go into ``inbox``."""
        self.add(key, inbox)
        try:
            yield
        finally:
            self.drop(key)

    def route(self, event: tuple[float, Any]) -> None:
        """The client's handler (on the client's own loop): never blocks."""
        _, message = event
        if isinstance(message, dict):
            inbox = self._inboxes.get(str(message.get(self.field)))
            if inbox is not None:
                inbox.put(("live", message))


#: Live output of the calls, by call id.
_live = LiveRoutes("call")


def live_messages(
    call: str, inbox: queue.SimpleQueue[tuple[str, Any]]
) -> AbstractContextManager[None]:
    """While inside, the live messages of the call ``call`` go into ``inbox`` (as
    ``("live", message)``)."""
    return _live.messages(call, inbox)
