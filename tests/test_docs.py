"""The docs say what the product has: every option and setting, a current picture of the
layers, and a README whose links lead somewhere and which stays one short page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cortex_jupyter.magic import COMMANDS, CortexMagics

ROOT = Path(__file__).parent.parent
MAGICS = (ROOT / "docs" / "magics.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")


def cell_options() -> list[str]:
    parser = CortexMagics.cortex.parser
    return sorted(option for action in parser._actions for option in action.option_strings)


@pytest.mark.parametrize("option", cell_options())
def test_every_cell_option_is_on_the_magics_page(option: str) -> None:
    assert f"`{option}" in MAGICS, f"docs/magics.md does not describe %%cortex {option}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_line_command_is_on_the_magics_page(command: str) -> None:
    assert f"`%cortex {command}" in MAGICS, f"docs/magics.md does not describe %cortex {command}"


@pytest.mark.parametrize("setting", sorted(CortexMagics.class_trait_names(config=True)))
def test_every_setting_is_on_the_magics_page(setting: str) -> None:
    row = re.compile(rf"^\| [^|]*`{setting}`[^|]*\|", re.MULTILINE)
    assert row.search(MAGICS), f"docs/magics.md has no row for CortexMagics.{setting}"


def test_the_architecture_picture_is_what_its_script_draws() -> None:
    script = ROOT / "scripts" / "architecture_svg.py"
    out = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_readme_links_lead_to_files_that_exist() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "the README links to no page of the docs"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_the_readme_is_one_short_page() -> None:
    assert len(README.splitlines()) <= 160, "README.md should stay about 150 lines"
