"""Every ``CortexMagics`` setting is checked when it is set, through a real shell's ``%config``.

A good value is taken as given; a bad one is refused at once in one line that names the
setting, the value and what it takes, and the setting keeps its old value, so the error never
waits for the next cell. The table below must hold a good and a bad value for every setting:
a new setting without them fails ``test_every_setting_is_covered``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter.magic import CortexMagics
from cortex_jupyter.runtime.core.cost.budget import Budget
from tests.helpers import config_refusal, config_says, magics, next_cell_runs

#: name: (good values as %config writes them, with what the setting then holds)
GOOD: dict[str, list[tuple[str, Any]]] = {
    "model": [("'smollm2'", "smollm2")],
    "dialect": [("'HERMES'", "hermes")],
    "max_turns": [("3", 3)],
    "temperature": [
        ("0.7", 0.7),
        ("0", 0.0),
        ("None", None),
        # numbers from numpy are numbers (a sweep over np.linspace, a value from a frame)
        ("__import__('numpy').float32(0.5)", 0.5),
        ("__import__('numpy').int64(1)", 1.0),
    ],
    "chunk_size": [("4", 4)],
    "delay": [("0", 0.0), ("0.5", 0.5), ("__import__('numpy').float32(0.25)", 0.25)],
    "native_tools": [("True", True)],
    "constrain": [("True", True), ("'vllm'", "vllm"), ("'GBNF'", "gbnf"), ("False", False)],
    "context_tokens": [("4096", 4096), ("None", None)],
    "approve": [("'deny'", "deny"), ("len", len)],
    "approve_timeout": [("2.5", 2.5), ("None", None), ("__import__('numpy').int64(3)", 3.0)],
    "overwrite": [("True", True)],
    "display": [("'text'", "text")],
    "live_views": [("0", 0), ("3", 3)],
    "request": [("{'seed': 1}", {"seed": 1})],
    "budget": [
        ("0.05", Budget(0.05)),
        ("'$0.05'", Budget(0.05)),
        ("'20000tok'", Budget(20000, "tok")),
        ("None", None),
    ],
    "dask_address": [("'tcp://127.0.0.1:8786'", "tcp://127.0.0.1:8786"), ("None", None)],
    # the run store: None or an empty text turns it off
    "store": [("None", None), ("''", None), ("'  '", None)],
}

#: name: (bad value as %config writes it, the value as the message shows it, what it takes)
BAD: dict[str, list[tuple[str, str, str]]] = {
    "model": [("5", "5", "unicode string"), ("'  '", "'  '", "must name a model")],
    "dialect": [("'klingon'", "'klingon'", "any of ['cortex', 'sigil'")],
    "max_turns": [("0", "0", "not be less than 1"), ("True", "True", "a whole number")],
    "temperature": [
        ("float('nan')", "nan", "a finite number, 0 or more, or None"),
        ("float('inf')", "inf", "a finite number, 0 or more, or None"),
        ("True", "True", "a finite number, 0 or more, or None"),
        ("-0.5", "-0.5", "not be less than 0"),
        ("'hot'", "'hot'", "expected a float"),
        ("__import__('numpy').float32('nan')", "nan", "a finite number, 0 or more, or None"),
        ("__import__('numpy').bool_(True)", "True", "expected a float"),
        ("10**400", "000000", "a finite number, 0 or more, or None"),
    ],
    "chunk_size": [("0", "0", "not be less than 1"), ("2.5", "2.5", "expected an int")],
    "delay": [
        ("float('nan')", "nan", "a finite number, 0 or more"),
        ("-1", "-1", "not be less than 0"),
    ],
    "native_tools": [("'yes'", "'yes'", "expected a boolean")],
    "constrain": [
        ("'yes'", "'yes'", "True, False, 'gbnf' or 'vllm'"),
        ("2", "2", "True, False, 'gbnf' or 'vllm'"),
        ("None", "None", "True, False, 'gbnf' or 'vllm'"),
    ],
    "context_tokens": [
        ("100", "100", "not be less than 256"),
        ("True", "True", "not be less than 256"),  # True is 1 to an Int, below the bound
    ],
    "approve": [("'sometimes'", "'sometimes'", "'ask', 'allow', 'deny' or a function")],
    "approve_timeout": [
        ("0", "0", "a number of seconds above 0, or None"),
        ("float('inf')", "inf", "a number of seconds above 0, or None"),
        ("float('nan')", "nan", "a number of seconds above 0, or None"),
    ],
    "overwrite": [("'yes'", "'yes'", "expected a boolean")],
    "display": [("'hologram'", "'hologram'", "any of ['auto', 'widgets', 'text']")],
    "live_views": [("-1", "-1", "not be less than 0"), ("True", "True", "a whole number")],
    "request": [
        ("{'n': 2}", "'n'", "cannot be set"),
        # NaN is no JSON: the server would get `NaN` in the body and refuse every cell
        ("{'temperature': float('nan')}", "'temperature'", "JSON value"),
    ],
    "budget": [
        ("-1", "-1", "a budget is US dollars"),
        ("'abc'", "'abc'", "a budget is US dollars (0.05, '$0.05') or tokens ('20000tok')"),
        ("float('nan')", "nan", "above 0"),
        ("True", "True", "above 0"),
    ],
    "dask_address": [
        ("5", "5", "unicode string"),
        ("'my cluster'", "'my cluster'", "a scheduler address such as tcp://host:8786"),
    ],
    "store": [("5", "5", "unicode string")],
}


@pytest.fixture
def settings(ip: InteractiveShell) -> Iterator[CortexMagics]:
    """The magics; afterwards the shell's config and the process-wide Dask address are
    put back (``%config`` keeps what it set, refused or not, in the shell's config)."""
    saved = dict(ip.config.CortexMagics)
    found = magics(ip)
    yield found
    found.dask_address = None
    section = ip.config.CortexMagics
    section.clear()
    section.update(saved)


def test_every_setting_is_covered() -> None:
    names = set(CortexMagics.class_own_traits(config=True))
    assert set(GOOD) == names
    assert set(BAD) == names


@pytest.mark.parametrize(
    ("name", "written", "held"), [(n, w, h) for n, cases in GOOD.items() for w, h in cases]
)
def test_a_good_value_is_taken(
    ip: InteractiveShell,
    settings: CortexMagics,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    written: str,
    held: Any,
) -> None:
    assert config_says(ip, monkeypatch, name, written) == []
    assert getattr(settings, name) == held


@pytest.mark.parametrize(
    ("name", "written", "shown", "allowed"),
    [(n, w, s, a) for n, cases in BAD.items() for w, s, a in cases],
)
def test_a_bad_value_is_refused_when_set_in_one_line(
    ip: InteractiveShell,
    settings: CortexMagics,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    written: str,
    shown: str,
    allowed: str,
) -> None:
    message = config_refusal(ip, monkeypatch, name, written)
    assert name in message and shown in message and allowed in message, message
    next_cell_runs(ip, capsys)  # nothing waits for it: it runs with the old value


@pytest.mark.parametrize(
    ("item", "held"),
    [("constrain=true", True), ("constrain=off", False), ("constrain=VLLM", "vllm")],
)
def test_cortex_config_takes_constrain_as_a_word(
    ip: InteractiveShell, settings: CortexMagics, item: str, held: Any
) -> None:
    ip.run_line_magic("cortex", f"config {item}")
    assert settings.constrain == held


def test_cortex_config_refuses_a_bad_constrain(
    ip: InteractiveShell, settings: CortexMagics
) -> None:
    # On this line true/false are words (as for native_tools); other text is a form.
    with pytest.raises(UsageError, match=r"constrain='maybe' was refused: .*'gbnf' or 'vllm'"):
        ip.run_line_magic("cortex", "config constrain=maybe")
    assert settings.constrain is False
