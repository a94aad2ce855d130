"""The pure dependency bookkeeping: readiness, skips with reasons, missing ids, cycles."""

from __future__ import annotations

import threading
from typing import Any

from cortex_jupyter.protocol.events import Action
from cortex_jupyter.runtime import ActionNode, Graph
from cortex_jupyter.runtime.core.record.graph import CapturedText


def node(id: str, mode: str = "async", **fields: Any) -> ActionNode:
    if "depends_on" in fields:
        fields["depends_on"] = tuple(fields["depends_on"])
    return ActionNode(id, "t", mode=mode, action=Action(id=id, name="t", mode=mode, **fields))


def ids(nodes: list[ActionNode]) -> list[str]:
    return [n.id for n in nodes]


def test_independent_actions_are_ready_at_once() -> None:
    graph = Graph()
    assert ids(graph.add(node("a")).ready) == ["a"]
    assert ids(graph.add(node("b")).ready) == ["b"]


def test_explicit_dependency_waits_for_success() -> None:
    graph = Graph()
    graph.add(node("a"))
    assert graph.add(node("b", depends_on=["a"])).ready == []
    graph.nodes["a"].status = "done"
    assert ids(graph.complete("a", ok=True).ready) == ["b"]


def test_failure_skips_dependents_transitively_with_reasons() -> None:
    graph = Graph()
    graph.add(node("a"))
    graph.add(node("b", depends_on=["a"]))
    graph.add(node("c", depends_on=["b"]))
    graph.nodes["a"].status = "failed"
    update = graph.complete("a", ok=False)
    assert [(n.id, reason) for n, reason in update.skipped] == [
        ("b", "depends on 'a', which failed"),
        ("c", "depends on 'b', which was skipped"),
    ]
    assert graph.nodes["c"].status == "skipped"


def test_dependency_on_already_failed_node_is_skipped_on_arrival() -> None:
    graph = Graph()
    graph.add(node("a"))
    graph.nodes["a"].status = "failed"
    graph.complete("a", ok=False)
    update = graph.add(node("b", depends_on=["a"]))
    assert [(n.id, r) for n, r in update.skipped] == [("b", "depends on 'a', which failed")]


def test_implicit_dependency_from_output_key_reference() -> None:
    graph = Graph()
    graph.add(node("a", output_key="rows"), output_key="rows")
    b = node("b")
    assert graph.add(b, references={"rows", "unrelated"}).ready == []
    assert b.depends_on == ("a",)


def test_implicit_dependency_uses_the_latest_earlier_writer() -> None:
    graph = Graph()
    graph.add(node("a"), output_key="x")
    graph.add(node("b"), output_key="x")
    c = node("c")
    graph.add(c, references={"x"})
    assert c.depends_on == ("b",)


def test_sync_action_orders_later_actions_and_any_outcome_releases_them() -> None:
    graph = Graph()
    assert ids(graph.add(node("s", mode="sync")).ready) == ["s"]
    later = node("later")
    assert graph.add(later).ready == []
    assert later.waits_for == ("s",)
    graph.nodes["s"].status = "failed"
    assert ids(graph.complete("s", ok=False).ready) == ["later"]


def test_fire_and_forget_and_async_do_not_order_later_actions() -> None:
    graph = Graph()
    graph.add(node("f", mode="fire_and_forget"))
    graph.add(node("a"))
    assert ids(graph.add(node("b")).ready) == ["b"]


def test_forward_reference_waits_until_the_id_arrives() -> None:
    graph = Graph()
    assert graph.add(node("b", depends_on=["a"])).ready == []
    assert graph.missing() == {"a": ["b"]}
    assert ids(graph.add(node("a")).ready) == ["a"]
    assert graph.missing() == {}


def test_missing_ids_are_skipped_at_the_end_with_the_id_named() -> None:
    graph = Graph()
    graph.add(node("b", depends_on=["ghost"]))
    graph.add(node("c", depends_on=["b"]))
    update = graph.resolve_missing()
    assert [(n.id, r) for n, r in update.skipped] == [
        ("b", "depends on 'ghost', which never appeared in the stream"),
        ("c", "depends on 'b', which was skipped"),
    ]
    assert graph.waiting == []


def test_two_node_cycle_is_found_when_it_closes() -> None:
    graph = Graph()
    graph.add(node("a", depends_on=["b"]))
    update = graph.add(node("b", depends_on=["a"]))
    reasons = {n.id: r for n, r in update.skipped}
    assert reasons == {"b": "dependency cycle: b -> a -> b", "a": "dependency cycle: b -> a -> b"}
    assert graph.waiting == []


def test_self_dependency_is_a_cycle() -> None:
    graph = Graph()
    update = graph.add(node("a", depends_on=["a"]))
    assert [(n.id, r) for n, r in update.skipped] == [("a", "dependency cycle: a -> a")]


def test_cycle_through_a_sync_barrier() -> None:
    graph = Graph()
    graph.add(node("s", mode="sync", depends_on=["x"]))
    update = graph.add(node("x"))
    assert {n.id for n, _ in update.skipped} == {"s", "x"}
    assert "dependency cycle: x -> s -> x" in {r for _, r in update.skipped}


def test_cycle_skips_dependents_outside_it() -> None:
    graph = Graph()
    graph.add(node("a", depends_on=["c"]))
    graph.add(node("b", depends_on=["a"]))
    graph.add(node("d", depends_on=["b"]))
    update = graph.add(node("c", depends_on=["b"]))
    reasons = {n.id: r for n, r in update.skipped}
    assert reasons["a"] == reasons["b"] == reasons["c"] == "dependency cycle: c -> b -> a -> c"
    assert reasons["d"] == "depends on 'b', which was skipped"


def test_a_long_chain_does_not_recurse() -> None:
    graph = Graph()
    graph.add(node("n0"))
    for i in range(1, 5000):
        graph.add(node(f"n{i}", depends_on=[f"n{i - 1}"]))
    graph.nodes["n0"].status = "failed"
    assert len(graph.complete("n0", ok=False).skipped) == 4999


def test_already_final_node_completes_on_arrival() -> None:
    graph = Graph()
    graph.add(node("b", depends_on=["bad"]))
    rejected = ActionNode("bad", "?", status="failed")
    update = graph.add(rejected)
    assert [(n.id, r) for n, r in update.skipped] == [("b", "depends on 'bad', which failed")]


def test_captured_text_reads_while_a_thread_writes() -> None:
    """Issue 19 §5: a tool's output is kept in pieces, joined when read; a read while a
    worker thread appends sees a prefix of what was written and loses nothing."""
    text = CapturedText("start\n")
    pieces = [f"{i}\n" for i in range(20_000)]
    reads: list[str] = []

    def writer() -> None:
        for piece in pieces:
            text.append(piece)

    thread = threading.Thread(target=writer)
    thread.start()
    while thread.is_alive():
        reads.append(text.text())
    thread.join()
    whole = "start\n" + "".join(pieces)
    assert text.text() == whole and len(text) == len(whole)
    assert all(whole.startswith(read) for read in reads)
    node = ActionNode("a", "tool")
    node.stdout = "from a saved run"
    assert node.stdout == "from a saved run" and len(node.captured_stdout) == 16
