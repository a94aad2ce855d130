"""Hostile input to ``%%cortex --compare`` and ``%cortex keep`` (issue 35): what a model,
a page or a careless line can do must not leak a secret or overwrite a notebook name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from tests.conftest import SECRET
from tests.models.fake_openai_server import FakeOpenAIServer
from tests.test_magic_compare import compare, reply
from tests.test_magic_compare import servers as servers  # the fixture
from tests.test_magic_compare_keep import add_tool as add_tool  # the fixture

PARAMETERS = f'{{"a": 2, "b": 3, "note": "{SECRET}"}}'
LEAK = f'<action id="s">{{"name": "keep_add", "parameters": {PARAMETERS}}}</action>'


@pytest.fixture
def leaky(ip: InteractiveShell, servers: list[FakeOpenAIServer], add_tool: None) -> Any:
    """A compare cell whose column ma wrote the API key in an action and its answer."""
    a, b, _ = servers
    a.script(reply(LEAK), reply(f"<response>5, key {SECRET}</response>"))
    b.script(reply("<response>5</response>"))
    return compare(ip, "--compare ma,mb", "What is 2 + 3? Use a tool.")


def test_keep_never_writes_a_secret_the_model_wrote_into_the_dataset_file(
    ip: InteractiveShell, leaky: Any, tmp_path: Path
) -> None:
    path = tmp_path / "cases.yaml"
    ip.run_line_magic("cortex", f"keep ma --to {path}")
    text = path.read_text(encoding="utf-8")
    assert "keep_add" in text and "5, key" in text
    assert SECRET not in text
    ip.run_line_magic("cortex", "keep ma --to cases")
    assert SECRET not in str(ip.user_ns["cases"].cases[0].to_data())


def test_keep_onto_a_name_holding_none_is_refused_and_the_name_kept(
    ip: InteractiveShell, leaky: Any
) -> None:
    ip.user_ns["mine"] = None
    with pytest.raises(UsageError, match="not a Dataset"):
        ip.run_line_magic("cortex", "keep mb --to mine")
    assert ip.user_ns["mine"] is None


@pytest.mark.parametrize("name", ["print", "len", "class"])
def test_keep_never_binds_a_builtin_or_a_keyword(
    ip: InteractiveShell, leaky: Any, name: str
) -> None:
    with pytest.raises(UsageError):
        ip.run_line_magic("cortex", f"keep mb --to {name}")
    assert name not in ip.user_ns


def test_keep_onto_a_directory_named_like_a_dataset_is_one_line(
    ip: InteractiveShell, leaky: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "cases.yaml"
    folder.mkdir()
    (folder / "inside.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("cortex", f"keep mb --to {folder}")
    assert "\n" not in str(caught.value)
    assert (folder / "inside.txt").read_text(encoding="utf-8") == "mine"


def test_keep_onto_a_file_that_is_not_a_dataset_leaves_it(
    ip: InteractiveShell, leaky: Any, tmp_path: Path
) -> None:
    path = tmp_path / "notes.yaml"
    path.write_text("shopping:\n  - milk\n", encoding="utf-8")
    with pytest.raises(UsageError):
        ip.run_line_magic("cortex", f"keep mb --to {path}")
    assert path.read_text(encoding="utf-8") == "shopping:\n  - milk\n"


def test_a_column_named_like_a_secret_never_reaches_the_cells_metadata(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cortex_jupyter.session import compare_views, session_for

    updates: list[Any] = []
    shown: list[Any] = []

    class Handle:
        def update(self, *args: Any, **kwargs: Any) -> None:
            updates.append((args, kwargs))

    def display(obj: Any, **kwargs: Any) -> Handle:
        shown.append(obj)
        return Handle()

    monkeypatch.setattr(compare_views, "display", display)
    a, b, _ = servers
    session_for(ip).endpoints[SECRET] = (b.url, SECRET)
    a.script(reply("<response>Paris.</response>"))
    b.script(reply("<response>Lyon.</response>"))
    ip.run_line_magic("config", "CortexMagics.display = 'widgets'")
    try:
        ip.run_cell_magic("cortex", f"--compare ma,{SECRET}", "Capital?")
    finally:
        ip.run_line_magic("config", "CortexMagics.display = 'auto'")
        session_for(ip).endpoints.pop(SECRET, None)
    box = ip.user_ns["_compare"].view.box
    assert SECRET not in repr(updates)
    assert SECRET not in repr([o for o in shown if isinstance(o, dict)])
    assert all(SECRET not in h.value for h in box._headers)
