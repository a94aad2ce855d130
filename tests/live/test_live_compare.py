"""``%%cortex --compare`` against the live SmolLM2-135M (issue 35, "How it is checked"):
the model in two dialects side by side, through the magic, one short turn each.

What is asserted is the machinery: both columns ran to an end, were stored with the
comparison's tag and were rendered (a section each and the summary table). What the
135M model wrote is printed and recorded in docs/live-model.md, never asserted.
"""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import local, store

pytestmark = pytest.mark.live

DIALECTS = ("cortex", "sigil")
#: One short turn a column: the two requests share the server (its slots), about 30 s.
LINE = "--text --temperature 0 --max-turns 1 --max-tokens 48"
PROMPT = "What is 2 + 3? Answer in one short sentence."


@pytest.mark.timeout(300)
def test_smollm2_in_two_dialects_side_by_side(
    live_ip: InteractiveShell, live_server: local.Server, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [f"{dialect}:{live_server.model}" for dialect in DIALECTS]
    start = time.monotonic()
    live_ip.run_cell_magic("cortex", f"{LINE} --compare {','.join(names)}", PROMPT)
    took = time.monotonic() - start
    shown = capsys.readouterr().out
    result = live_ip.user_ns["_compare"]

    with capsys.disabled():
        print(f"\n[live compare] {took:.1f} s", flush=True)
        for name in names:
            run = result[name].run
            print(f"{name}: {run.status} ({run.reason or '-'}), {len(run.actions)} action(s), "
                  f"tokens {run.usage}, answer {run.answer[:160]!r}", flush=True)  # fmt: skip
        print(result.summary(), flush=True)

    assert list(result) == names
    for name in names:
        run = result[name].run
        assert run is not None and run.status not in ("running", "waiting"), (name, run)
        assert run.ended is not None
        assert f"== {name} ==" in shown, shown[-2000:]
    assert "column" in shown and "first action" in shown  # the summary table

    store.open_store().flush()
    db = sqlite3.connect(store.current_path())
    rows = [json.loads(row[0]) for row in db.execute("select options from runs")]
    tagged = {o["column"]: o for o in rows if o.get("compare") == result.id}
    assert set(tagged) == set(names)
    for dialect, name in zip(DIALECTS, names, strict=True):
        assert tagged[name]["dialect"] == dialect and tagged[name]["model"] == live_server.model
