"""The SQLite cache relic: values, expiry, location, threads and other processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from cortex_jupyter.runtime import CacheRelic, CacheValueError, data_dir, default_cache_path


@pytest.fixture
def cache(tmp_path: Path) -> CacheRelic:
    relic = CacheRelic(tmp_path / "cache.sqlite3")
    yield relic  # type: ignore[misc]
    relic.close()


def test_set_get_delete(cache: CacheRelic) -> None:
    assert cache.get("k") is None
    assert cache.get("k", default="d") == "d"
    cache.set("k", {"rows": [1, 2], "name": "x"})
    assert cache.get("k") == {"rows": [1, 2], "name": "x"}
    cache.set("k", 2)
    assert cache.get("k") == 2
    assert cache.delete("k") is True
    assert cache.delete("k") is False
    assert cache.get("k") is None


def test_ttl_expires(tmp_path: Path) -> None:
    now = [1_000.0]
    cache = CacheRelic(tmp_path / "cache.sqlite3", clock=lambda: now[0])
    cache.set("short", "v", ttl=0.05)
    cache.set("long", "v", ttl=60)
    assert cache.get("short") == "v"
    now[0] += 0.08
    assert cache.get("short") is None
    assert cache.get("long") == "v"
    cache.close()


def test_non_json_values_are_refused(cache: CacheRelic) -> None:
    with pytest.raises(
        CacheValueError, match="cache key 'k': a value of type object cannot be stored"
    ):
        cache.set("k", object())
    with pytest.raises(CacheValueError):
        cache.set("k", float("nan"))


def test_values_survive_a_new_instance(tmp_path: Path) -> None:
    first = CacheRelic(tmp_path / "c.sqlite3")
    first.set("k", [1, "two"])
    first.close()
    second = CacheRelic(tmp_path / "c.sqlite3")
    assert second.get("k") == [1, "two"]
    second.close()


def test_location_env_var_and_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORTEX_JUPYTER_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "cortex_jupyter" / "cache.sqlite3"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert data_dir() == Path.home() / ".local" / "share" / "cortex_jupyter"
    monkeypatch.setenv("CORTEX_JUPYTER_DATA_DIR", str(tmp_path / "mine"))
    relic = CacheRelic()
    relic.set("k", 1)
    relic.close()
    assert (tmp_path / "mine" / "cache.sqlite3").exists()


def test_concurrent_threads(cache: CacheRelic) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                cache.set(f"t{n}-{i}", i)
                assert cache.get(f"t{n}-{i}") == i
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert cache.get("t7-49") == 49


WRITER = textwrap.dedent(
    """
    import sys
    from cortex_jupyter.runtime import CacheRelic
    relic = CacheRelic(sys.argv[1])
    name = sys.argv[2]
    for i in range(int(sys.argv[3])):
        relic.set(f"{name}-{i}", {"i": i, "by": name})
        relic.set("shared", name)
    relic.close()
    """
)


def test_two_processes_share_the_database(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    env_cwd = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, "200"], cwd=env_cwd,
            stderr=subprocess.PIPE, text=True,
        )
        for name in ("p1", "p2")
    ]  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    reader = CacheRelic(path)
    assert reader.get("p1-199") == {"i": 199, "by": "p1"}
    assert reader.get("p2-0") == {"i": 0, "by": "p2"}
    assert reader.get("shared") in ("p1", "p2")
    reader.set("from-parent", True)
    reader.close()
    check = subprocess.run(
        [sys.executable, "-c", "import sys; from cortex_jupyter.runtime import CacheRelic;"
         "print(CacheRelic(sys.argv[1]).get('from-parent'))", str(path)],
        cwd=env_cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.stdout.strip() == "True", check.stderr
