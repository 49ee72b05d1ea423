"""The MCP tools against the REST API they wrap, so the two cannot drift apart.

Each tool names an operation; that operation must exist in the app's OpenAPI document, and the
tool's input schema must be exactly the operation's inputs: its path ids, then the properties
and the required list of its request body's schema, or its query parameters, as the API
declares them. Its output schema is the schema of the operation's 2xx answer. The example in
each description must be accepted by the tool's own input schema.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agentcron.web.mcp.tools import TOOLS, ApiTool
from tests.integration.test_api_doc import openapi

REF = "#/components/schemas/"


def operation(tool: ApiTool) -> dict[str, Any]:
    found: dict[str, Any] = openapi()["paths"][tool.path][tool.method.lower()]
    return found


def component(ref: str) -> dict[str, Any]:
    assert ref.startswith(REF), ref
    schema: dict[str, Any] = openapi()["components"]["schemas"][ref.removeprefix(REF)]
    return schema


def body_schema(op: dict[str, Any]) -> dict[str, Any] | None:
    """The request body's model schema (an optional body, ``Model | null``, unwrapped)."""
    schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return None
    refs = [part["$ref"] for part in schema.get("anyOf", [schema]) if "$ref" in part]
    assert len(refs) == 1, schema
    return component(refs[0])


def stated(schema: Any) -> Any:
    """``schema`` without ``"default": null``: the OpenAPI document leaves a null default out,
    the model's own schema (the tool's) states it; nothing else may differ."""
    if isinstance(schema, dict):
        return {
            key: stated(value)
            for key, value in schema.items()
            if not (key == "default" and value is None)
        }
    if isinstance(schema, list):
        return [stated(item) for item in schema]
    return schema


def success_refs(op: dict[str, Any]) -> list[str]:
    """The model names the operation answers a 2xx with (none for a 204)."""
    names = []
    for code, answer in op["responses"].items():
        if code.startswith("2"):
            schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
            names += [part["$ref"] for part in schema.get("anyOf", [schema]) if "$ref" in part]
    return [name.removeprefix(REF) for name in names]


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.name)
def test_the_input_schema_is_the_operations_inputs(tool: ApiTool) -> None:
    op = operation(tool)
    schema = tool.definition().input_schema
    properties, required = schema["properties"], schema.get("required", [])
    parameters = op.get("parameters", [])
    path_ids = [p["name"] for p in parameters if p["in"] == "path"]
    # The ids come first, then what the operation takes besides them.
    assert list(properties)[: len(path_ids)] == path_ids
    assert required[: len(path_ids)] == path_ids
    rest = {name: stated(prop) for name, prop in properties.items() if name not in path_ids}
    rest_required = [name for name in required if name not in path_ids]

    body = body_schema(op)
    query = {p["name"]: p for p in parameters if p["in"] == "query"}
    assert body is None or not query, "an operation takes a body or a query, not both"
    if body is not None:
        assert rest == body["properties"]
        assert rest_required == body.get("required", [])
        assert schema["additionalProperties"] is body["additionalProperties"] is False
    elif query:
        assert rest == {name: p["schema"] for name, p in query.items()}
        assert rest_required == [name for name, p in query.items() if p["required"]]
    else:
        assert rest == {}
        assert schema["additionalProperties"] is False


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.name)
def test_the_output_schema_is_the_operations_answer(tool: ApiTool) -> None:
    answers = success_refs(operation(tool))
    output = tool.definition().output_schema
    if len(answers) == 1:
        assert tool.answer is not None and tool.answer.__name__ == answers[0]
        assert output is not None and output["type"] == "object"
        assert set(output["properties"]) == set(component(REF + answers[0])["properties"])
    else:
        # A 204, or an answer of two shapes (resume, or its dry run): no single schema.
        assert output is None


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.name)
def test_each_schema_is_json_schema_and_the_example_fits_it(tool: ApiTool) -> None:
    definition = tool.definition()
    Draft202012Validator.check_schema(definition.input_schema)
    assert definition.input_schema["type"] == "object"
    if definition.output_schema is not None:
        Draft202012Validator.check_schema(definition.output_schema)
    assert definition.description is not None
    example = re.search(r"^Example: (\{.*\})$", definition.description, re.MULTILINE)
    assert example, f"{tool.name}: no 'Example: {{...}}' line"
    Draft202012Validator(definition.input_schema).validate(json.loads(example.group(1)))


def test_every_tool_names_a_distinct_operation() -> None:
    operations = [(tool.method, tool.path) for tool in TOOLS]
    assert len(set(operations)) == len(operations)
    assert len({tool.name for tool in TOOLS}) == len(TOOLS)
