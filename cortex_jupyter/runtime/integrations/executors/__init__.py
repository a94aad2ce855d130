"""Running sync tools off the kernel's process: a Dask cluster, or any Executor.

Why: sync tools run in the kernel's worker threads, and CPU-bound ones take turns on
the GIL (six 0.2 s pure-Python calls take 1.13 s in threads, 0.60 s on two worker
processes). ``@tool(executor="dask")`` sends a tool to the session's Dask cluster;
``executor=`` also takes any ``concurrent.futures.Executor`` (a ``ProcessPoolExecutor``,
a Dask client's ``get_executor()``). What the tool prints, logs and warns and its
``progress()`` reports reach its action as they do for a local tool; cancelling the
action (Stop, its timeout) cancels the call.

Timeouts, retries and cancellation stay the scheduler's: Dask does not retry a task
(the local cluster also fails a task whose worker died at once, ``allowed_failures=0``).

The package, from the bottom up:

- ``errors``: what a call elsewhere can fail with (``NotSendable``, ``WorkerDied``,
  ``ClusterUnavailable``);
- ``wire``: what travels between the kernel and the worker (cloudpickle, the outcome,
  the remote traceback with the kernel's sources put back);
- ``worker``: the worker's side, which runs the tool and records what it writes;
- ``cluster``: the session's Dask cluster (``set_dask_address``, ``cluster_info``,
  ``close_all``) and the live messages its workers send;
- ``call``: the kernel's side, ``run_elsewhere``, the scheduler's one entry point.

Importing the package plugs ``run_elsewhere`` into the core's ``Registry.run_elsewhere``
hook, through which the scheduler runs every tool registered with ``executor=``.
Nothing here imports the agent loop, MCP, models, the display or the session; dask,
distributed and cloudpickle are imported on first use.
"""

from cortex_jupyter.runtime.core.calls.registry import Registry
from cortex_jupyter.runtime.integrations.executors.call import run_elsewhere
from cortex_jupyter.runtime.integrations.executors.cluster import (
    ClusterInfo,
    close_all,
    cluster_info,
    dask_client,
    set_dask_address,
    set_dask_dashboard,
)
from cortex_jupyter.runtime.integrations.executors.errors import (
    ClusterUnavailable,
    NotSendable,
    WorkerDied,
)

__all__ = [
    "ClusterInfo",
    "ClusterUnavailable",
    "NotSendable",
    "WorkerDied",
    "close_all",
    "cluster_info",
    "dask_client",
    "run_elsewhere",
    "set_dask_address",
    "set_dask_dashboard",
]

Registry.run_elsewhere = run_elsewhere  # the scheduler runs executor= tools through it
