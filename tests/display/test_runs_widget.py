"""The ``%cortex runs`` table's open buttons from the front end's side: a click sends
``{"open": ID}``, and only the runs the table lists open (a message is the front end's
text, and any page code could send one)."""

from __future__ import annotations

from cortex_jupyter.display.runs_widget import RunsTable, runs_view


def test_a_click_opens_the_run_it_names_and_nothing_else_does() -> None:
    opened: list[str] = []
    table = RunsTable("<table></table>", opened.append, ["3f2a9c01b7de", "b29631375a9a"])
    for content in (
        {"open": "3f2a9c01b7de"},
        {"open": "3f"},  # the start of a listed id: %cortex open would complete it
        {"open": "0123456789ab"},  # a run the table does not list
        {"open": ["3f2a9c01b7de"]},
        {"open": ""},
        "3f2a9c01b7de",
    ):
        table._handle_custom_msg(content, [])
    assert opened == ["3f2a9c01b7de"]


def test_the_view_shows_a_clicked_run_under_the_table() -> None:
    opened: list[str] = []
    box = runs_view("<table></table>", opened.append, ["b29631375a9a"])
    table = box.children[0]
    table._handle_custom_msg({"open": "b29631375a9a"}, [])
    table._handle_custom_msg({"open": "b2"}, [])
    assert opened == ["b29631375a9a"]
