"""The scope-escape paths of issue 33 in a real ipykernel, where a widget's ``comm.kernel``
is the kernel itself, its ``shell.user_ns`` the notebook and its ``session.key`` the key
that signs every message: a ``$name.path`` stops at the first step into them."""

from __future__ import annotations

import json

from .harness import Kernel

NOTEBOOK = """
import json
import ipywidgets
from cortex_jupyter import default_registry

@default_registry.tool(name="kt_peek")
def kt_peek(value: object) -> str:
    \"\"\"Look at a value.\"\"\"
    return f"peeked: {value}"

private_notes = "my diary: the vault code is 4417"
slider = ipywidgets.IntSlider(value=7)
def counter():
    yield 1
gen = counter()
"""

PATHS = {
    "key": "$slider.comm.kernel.session.key",
    "notes": "$slider.comm.kernel.shell.user_ns.private_notes",
    "os": "$slider.comm.kernel.shell.user_ns.os",
    "frame": "$gen.gi_frame.f_globals.private_notes",
    "value": "$slider.value",
}


def test_a_path_never_reaches_the_kernel_its_key_or_the_notebook(kernel: Kernel) -> None:
    setup = kernel.execute(
        NOTEBOOK,
        user_expressions={
            "kernel": "type(slider.comm.kernel).__module__",
            "key": "slider.comm.kernel.session.key.decode()",
        },
    )
    found = {k: v["data"]["text/plain"] for k, v in setup.reply["user_expressions"].items()}
    assert found["kernel"].startswith("'ipykernel")  # the real kernel is one step away
    key = found["key"].strip("'")
    assert len(key) > 8
    actions = "".join(
        f'<action id="{id}">{json.dumps({"name": "kt_peek", "parameters": {"value": p}})}</action>'
        for id, p in PATHS.items()
    )
    run = kernel.execute(f"%%cortex --script --delay 0 --text\n{actions}\n<response>ok</response>")
    report = "{k: [n.status, n.error or n.output] for k, n in _cortex.actions.items()}"
    shown = kernel.execute(f"print(json.dumps({report}))")
    outcome = json.loads(shown.stream("stdout").strip().splitlines()[-1])
    assert outcome["value"] == ["done", "peeked: 7"]
    assert outcome["key"][0] == "failed" and outcome["key"][1].startswith(
        "$slider.comm is not reachable"
    )
    assert outcome["notes"][0] == outcome["os"][0] == outcome["frame"][0] == "failed"
    assert outcome["frame"][1].startswith("$gen.gi_frame is not reachable")
    everything = json.dumps([m.content for m in run.messages]) + json.dumps(outcome)
    assert key not in everything and "4417" not in everything
