"""RunSpec: one value says what a run is, and a nested run derives its own from it."""

from __future__ import annotations

from typing import Any

import pytest

from cortex_jupyter.runtime import Registry, Run, RunSpec, Scheduler
from cortex_jupyter.runtime.scheduler.approval import Rules

pytestmark = pytest.mark.anyio


async def test_a_scheduler_runs_what_its_spec_says(registry: Registry, act: Any) -> None:
    bound: dict[str, Any] = {}
    spec = RunSpec(registry=registry, namespace={"a": 2}, bind=bound.__setitem__)
    run = Run()
    async with Scheduler(spec, run=run) as scheduler:
        scheduler.submit(act("x", "add", parameters={"a": "$a", "b": 3}, output_key="five"))
    assert run.actions["x"].output == 5
    assert bound == {"five": 5}


def test_keywords_make_the_same_spec_and_an_unknown_one_is_named() -> None:
    registry = Registry()
    assert Scheduler(registry=registry, max_depth=2).spec == RunSpec.of(
        registry=registry, max_depth=2
    )
    with pytest.raises(TypeError, match="registy"):
        RunSpec.of(registy=registry)
    with pytest.raises(TypeError, match="not both: registry"):
        Scheduler(RunSpec(), registry=registry)


def test_the_approve_keywords_make_the_rules_unless_rules_are_given() -> None:
    spec = RunSpec.of(approve_names=frozenset({"send"}), approve_timeout=5.0)
    assert spec.rules.names == frozenset({"send"})
    assert spec.rules.timeout == 5.0
    given = Rules.of("deny")
    assert RunSpec.of(rules=given, approve_names=frozenset({"x"})).rules is given


def test_a_nested_spec_is_one_level_deeper_and_keeps_none_of_the_hosts_hooks() -> None:
    spec = RunSpec(namespace={"a": 1}, bind=lambda name, value: None, max_depth=3)
    inner = spec.nested(max_depth=2)
    assert (inner.depth, inner.max_depth) == (1, 2)
    assert inner.bind is None and inner.background is None
    assert inner.namespace == {"a": 1}
