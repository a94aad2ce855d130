"""Registering actions: the decorator, argument checks, unknown names, schemas."""

from __future__ import annotations

from typing import Any

import pytest

from cortex_jupyter.runtime import (
    CacheRelic,
    InvalidArguments,
    RegistrationError,
    Registry,
    Step,
    UnknownAction,
    default_registry,
    tool,
)


def test_bare_decorator_registers_under_the_function_name_and_returns_it() -> None:
    registry = Registry(builtins=False)

    @registry.tool
    def greet(name: str) -> str:
        """Say hello."""
        return f"hi {name}"

    spec = registry.get("tool", "greet")
    assert spec.func is greet
    assert greet("ada") == "hi ada"
    assert spec.schema() == {
        "type": "tool",
        "name": "greet",
        "description": "Say hello.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        },
    }


def test_decorator_with_name_and_type() -> None:
    registry = Registry(builtins=False)

    @registry.tool(name="store.lookup", type="relic", description="Look up a key.")
    async def lookup(key: str) -> Any:
        return key

    assert registry.names("relic") == ["store.lookup"]
    assert registry.names("tool") == []
    spec = registry.get("relic", "store.lookup")
    assert spec.description == "Look up a key."
    assert spec.is_async  # type: ignore[union-attr]


def test_module_level_tool_uses_the_default_registry() -> None:
    @tool
    def _registry_test_probe(x: int) -> int:
        return x

    try:
        assert default_registry.get("tool", "_registry_test_probe").func is _registry_test_probe
    finally:
        default_registry.remove("tool", "_registry_test_probe")


def test_unknown_name_lists_registered_names_of_that_type() -> None:
    registry = Registry(builtins=False)
    registry.tool(lambda: None, name="b_tool")
    registry.tool(lambda: None, name="a_tool")
    with pytest.raises(
        UnknownAction,
        match="no tool named 'nope' is registered; registered tool names: a_tool, b_tool",
    ):
        registry.get("tool", "nope")
    with pytest.raises(UnknownAction, match="registered agent names: none"):
        registry.get("agent", "x")


def add(a: int, /, b: int, *, scale: float = 1.0) -> float:
    return (a + b) * scale


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"a": 1},
            r"tool 'add' cannot be called: missing parameter 'b'; "
            r"it takes \(a: int, b: int, scale: float = 1.0\)",
        ),
        ({"a": 1, "b": 2, "c": 3}, r"cannot be called: unexpected parameter 'c';"),
        ({"z": 1}, r"missing parameters 'a', 'b', unexpected parameter 'z'; it takes"),
    ],
)
def test_arguments_are_checked_against_the_signature(params: dict[str, Any], message: str) -> None:
    spec = Registry(builtins=False).register(add)
    with pytest.raises(InvalidArguments, match=message):
        spec.check(params)


def test_positional_only_parameters_are_passed_positionally() -> None:
    spec = Registry(builtins=False).register(add)
    args, kwargs = spec.check({"a": 1, "b": 2, "scale": 2.0})
    assert spec.func(*args, **kwargs) == 6.0


def test_var_keyword_accepts_extra_parameters() -> None:
    def f(a: int, **rest: Any) -> dict[str, Any]:
        return rest

    spec = Registry(builtins=False).register(f)
    args, kwargs = spec.check({"a": 1, "x": 2})
    assert spec.func(*args, **kwargs) == {"x": 2}


@pytest.mark.parametrize(
    ("thing", "kwargs", "message"),
    [
        (42, {}, "it is not callable"),
        (lambda: None, {}, "no usable name"),
        (print, {"type": "agent"}, "register agents with add_agent"),
    ],
)
def test_registration_errors(thing: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistrationError, match=message):
        Registry(builtins=False).register(thing, **kwargs)


def test_builtins_are_registered(tmp_path: Any) -> None:
    registry = Registry(cache=CacheRelic(tmp_path / "c.sqlite3"))
    assert registry.names("relic") == ["cache.delete", "cache.get", "cache.set"]
    assert registry.names("llm") == ["classify", "complete", "summarise"]
    assert registry.names("internal") == ["add_feed", "remove_feed", "update_feed"]
    assert not (tmp_path / "c.sqlite3").exists()  # created on first use only
    internal = registry.get("internal", "add_feed")
    assert "feeds" not in internal.parameters["properties"]
    assert internal.takes() == "id: str, text: str"  # type: ignore[union-attr]


def test_agents_and_workflows() -> None:
    registry = Registry(builtins=False)
    registry.add_agent("researcher", "Find facts.\nBe brief.")
    registry.add_workflow("pipeline", [Step("fetch"), {"name": "clean", "output_key": "c"}])
    schemas = {s["name"]: s for s in registry.schemas()}
    assert schemas["researcher"]["description"] == "Find facts."
    assert schemas["researcher"]["parameters"]["required"] == ["task"]
    assert schemas["pipeline"]["description"] == "Runs fetch -> clean."
    with pytest.raises(InvalidArguments, match="missing parameter 'task'"):
        registry.get("agent", "researcher").check({})
    with pytest.raises(RegistrationError, match="no steps"):
        registry.add_workflow("empty", [])
    assert ("agent", "researcher") in registry
    assert ("tool", "researcher") not in registry


def test_every_builtin_schema_is_json(tmp_path: Any) -> None:
    import json

    registry = Registry(cache=CacheRelic(tmp_path / "c.sqlite3"))
    registry.add_agent("a", "Do things.")
    schemas = registry.schemas()
    assert json.loads(json.dumps(schemas)) == schemas
    get = next(s for s in schemas if s["name"] == "cache.get")
    assert get["description"].startswith("The value stored under ``key``")
