"""A widget that shows the HTML the kernel gives it and sends back what its buttons say.

``ClickableHtml`` is an ``anywidget`` whose ``value`` is the HTML to show (redrawn when it
changes); a subclass's front end is ``clickable_esm(on_click)``, where ``on_click`` runs
when a click lands on an element ``selector`` matches inside the widget (``target``, with
``event``, ``el`` and ``model`` in scope) and ``model.send``s what it stands for. The
kernel checks every message: it is the front end's text, and any code on the page can
send one.
"""

from __future__ import annotations

import json

import anywidget
import traitlets

__all__ = ["ClickableHtml", "clickable_esm"]

_RENDER = """
function render({ model, el }) {
  const draw = () => { el.innerHTML = model.get("value"); };
  draw();
  model.on("change:value", draw);
  el.addEventListener("click", (event) => {
    const target = event.target.closest(/*selector*/);
    if (!target || !el.contains(target)) { return; }
/*on click*/
  });
}
export default { render };
"""


def clickable_esm(on_click: str, selector: str = "button") -> str:
    """The front-end module: draw ``value``, and run ``on_click`` on every click on an
    element ``selector`` matches (a CSS selector) inside it."""
    return _RENDER.replace("/*selector*/", json.dumps(selector)).replace(
        "/*on click*/", on_click.strip("\n")
    )


class ClickableHtml(anywidget.AnyWidget):
    """The HTML in ``value``, drawn again when it changes (a subclass sets ``_esm``)."""

    value = traitlets.Unicode("").tag(sync=True)
