"""The package's top level: light to import, public names reachable."""

from __future__ import annotations

import subprocess
import sys

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
