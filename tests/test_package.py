"""The package's top level: light to import, public names reachable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cortex_jupyter


def test_import_is_light() -> None:
    code = (
        "import sys, cortex_jupyter; "
        "print(sorted(m for m in ('IPython', 'ipywidgets', 'openai', 'anyio') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tool_decorator_registers_in_the_default_registry() -> None:
    @cortex_jupyter.tool(name="test_package_double")
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    try:
        spec = cortex_jupyter.default_registry.get("tool", "test_package_double")
        assert spec.func is double
        assert spec.parameters["required"] == ["x"]
    finally:
        cortex_jupyter.default_registry.remove("tool", "test_package_double")


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        cortex_jupyter.nope  # noqa: B018


def test_a_script_cell_does_not_import_openai(tmp_path: Path) -> None:
    """``openai`` costs about half a second to import; a ``--script`` cell calls no model."""
    code = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "ip.run_line_magic('load_ext', 'cortex_jupyter')\n"
        "ip.run_cell_magic('cortex', '--script', '<response>hi</response>')\n"
        "assert ip.user_ns['_cortex'].status == 'completed', ip.user_ns['_cortex'].status\n"
        "print(sorted(m for m in sys.modules if m == 'openai' or m.startswith('openai.')))\n"
    )
    env = {**os.environ, "IPYTHONDIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_openai_model_is_reachable_from_the_top_level() -> None:
    from cortex_jupyter import OpenAIModel
    from cortex_jupyter.models import OpenAIModel as from_models
    from cortex_jupyter.models.openai_client import OpenAIModel as defined

    assert OpenAIModel is from_models is defined
