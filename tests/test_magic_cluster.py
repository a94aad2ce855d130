"""``%cortex cluster`` and ``CortexMagics.dask_address`` through a real IPython shell."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.runtime.integrations import executors
from tests.helpers import local_cluster


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts and ends with no cluster and no address set."""
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    executors.close_all()
    executors.set_dask_address(None)
    yield
    executors.close_all()
    executors.set_dask_address(None)


def cluster(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> str:
    ip.run_line_magic("cortex", "cluster")
    return capsys.readouterr().out.strip()


def test_no_cluster_yet_before_first_use(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cluster(ip, capsys) == (
        'no cluster yet: the first executor="dask" tool will use a local cluster started by '
        "cortex_jupyter"
    )


def test_dask_address_from_config_and_from_cortex_config(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("config", 'CortexMagics.dask_address = "tcp://127.0.0.1:8786"')
    try:
        assert cluster(ip, capsys) == (
            'no cluster yet: the first executor="dask" tool will use the scheduler at '
            "tcp://127.0.0.1:8786 (from set_dask_address)"
        )
        # Configured before the extension is loaded (ipython_config.py, %config): taken too.
        ip.run_line_magic("unload_ext", "cortex_jupyter")
        executors.set_dask_address(None)
        ip.run_line_magic("load_ext", "cortex_jupyter")
        assert "tcp://127.0.0.1:8786" in cluster(ip, capsys)
        ip.run_line_magic("cortex", "config dask_address=none")
        assert "dask_address = None" in capsys.readouterr().out
        assert cluster(ip, capsys).endswith("will use a local cluster started by cortex_jupyter")
    finally:
        ip.config.CortexMagics.pop("dask_address", None)


def test_a_dask_tool_runs_on_the_configured_cluster_and_unload_closes_the_client(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with local_cluster() as scheduler:
        ip.run_line_magic("config", f'CortexMagics.dask_address = "{scheduler.scheduler_address}"')

        @default_registry.tool(name="cluster_square", executor="dask")
        def square(x: int) -> int:
            """x squared, on the cluster."""
            return x * x

        try:
            ip.run_cell_magic(
                "cortex",
                "--script --delay 0",
                '<action id="s">{"name": "cluster_square", "parameters": {"x": 7}}</action>',
            )
            assert ip.user_ns["_cortex"].actions["s"].output == 49
            capsys.readouterr()
            shown = cluster(ip, capsys)
            assert shown.startswith(
                f"dask cluster at {scheduler.scheduler_address} (set_dask_address): 1 worker, "
                "1 thread, "
            )
            assert "dashboard: http://" in shown
            closed: list[Any] = []
            real = executors.close_all
            monkeypatch.setattr(executors, "close_all", lambda: closed.append(real()))
            ip.run_line_magic("unload_ext", "cortex_jupyter")
            ip.run_line_magic("load_ext", "cortex_jupyter")
            assert closed == [None]
            assert executors.cluster_info().address is None  # the client is gone
        finally:
            default_registry.remove("tool", "cluster_square")
            ip.config.CortexMagics.pop("dask_address", None)
            executors.close_all()  # before the cluster goes
