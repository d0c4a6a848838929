"""A JSON schema's grammar has llama.cpp's whitespace (``SPACE_RULE``), not the older converter's one blank."""

from __future__ import annotations

import re

import pytest

from workers.inference.http._json import Json
from workers.inference.http._schema_grammar import LLAMA_CPP_SPACE_RULE, schema_to_gbnf


@pytest.mark.parametrize(
    "schema",
    [
        {"items": [{"type": "integer"}]},  # llama.cpp's test_completion_with_response_format
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        {"const": "42"},
    ],
)
def test_a_schemas_grammar_lets_json_break_lines_and_indent_as_llama_cpps(schema: Json) -> None:
    gbnf = schema_to_gbnf(schema)
    rules = dict(line.split(" ::= ", 1) for line in gbnf.splitlines() if " ::= " in line)
    assert "root" in rules
    assert rules["space"] == LLAMA_CPP_SPACE_RULE.split(" ::= ", 1)[1]
    assert rules["space"] == r'| " " | "\n"{1,2} [ \t]{0,20}'  # common/json-schema-to-grammar.cpp
    assert not re.search(r'^space ::= " "\?$', gbnf, re.MULTILINE)


def test_a_schema_the_converter_cannot_express_raises() -> None:
    with pytest.raises(Exception, match=r"hiccup|type"):
        schema_to_gbnf({"type": "hiccup"})
