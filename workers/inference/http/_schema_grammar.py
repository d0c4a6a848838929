"""A JSON schema as llama.cpp's grammar: llama-cpp-python's converter, with llama.cpp's whitespace.

llama-cpp-python ports an older ``json_schema_to_grammar``, whose ``space`` is one optional blank;
llama.cpp's own converter (``common/json-schema-to-grammar.cpp``, ``SPACE_RULE``) also lets the model
break the line and indent, as JSON is usually written. Without it a model that would open
``[`` with a newline is forced elsewhere, and the same request samples other JSON than llama-server.
"""

from __future__ import annotations

import json
import re

from workers.inference.http._json import Json

LLAMA_CPP_SPACE_RULE = r'space ::= | " " | "\n"{1,2} [ \t]{0,20}'
_CONVERTER_SPACE_RULE = re.compile(r'^space ::= " "\?$', re.MULTILINE)


def schema_to_gbnf(schema: Json) -> str:
    """The GBNF of ``schema`` (root rule ``root``). Raises what the converter raises on a schema it
    cannot express (plain exceptions: callers turn them into their 400)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf  # light: no numpy

    return _CONVERTER_SPACE_RULE.sub(lambda _m: LLAMA_CPP_SPACE_RULE, json_schema_to_gbnf(json.dumps(schema)))
