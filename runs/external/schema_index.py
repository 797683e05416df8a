"""One walk over a tenant's input_schema at registration: its limits, and the index its reference
checks read, so registering costs time in proportion to the schema, whatever it holds.

The limits bound what every later check may cost (the metaschema's check takes about 0.4 ms per
schema within the schema; a check per reference of the whole schema took 181 s for 12,000 anchors):
- MAX_SCHEMA_BYTES of compact JSON, MAX_SCHEMA_DEPTH levels of nesting;
- MAX_SCHEMA_SUBSCHEMAS schemas within it (each property, item, definition, branch of anyOf, oneOf
  or allOf...; `true` and `false` count too);
- MAX_SCHEMA_REFERENCES references ($ref, $dynamicRef, $recursiveRef).
A schema past one is a 422 `input_schema_too_large` naming the limit, before any other check.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from core.digests import json_depth_over
from core.errors import InvalidInput

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 32
MAX_SCHEMA_SUBSCHEMAS = 1000
MAX_SCHEMA_REFERENCES = 200

# Keywords whose values are data, not schemas: a "$ref" key inside them is not a reference.
DATA = ("enum", "const", "default", "examples")
# Keywords whose values map names to schemas: a property named "enum" or "$ref" is a name there.
NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
ANCHOR_KEYS = ("$anchor", "$dynamicAnchor")

Path = tuple[str, ...]


class SchemaTooLarge(InvalidInput):
    code = "input_schema_too_large"

    def __init__(self, what: str, limit: int, found: str) -> None:
        super().__init__(
            f"input_schema is too large: {found}; at most {limit:,} {what} (split the workflow's input "
            "or check less of it in the schema)",
            details={"limit": what, "maximum": limit},
        )


@dataclass
class SchemaIndex:
    """What the reference checks need, found in one walk."""

    objects: dict[Path, dict[str, Any]] = field(default_factory=dict)  # every schema object by path
    anchors: dict[str, Path] = field(default_factory=dict)  # each anchor's first schema object
    refs: list[tuple[Path, str]] = field(default_factory=list)  # (the object holding it, the reference)
    nested_ids: list[str] = field(default_factory=list)  # ids below the top

    def target(self, schema: dict[str, Any], ref: str) -> Any:
        """What a reference within the schema names (a JSON pointer or an anchor), or MISSING: a
        lookup, never a walk of the schema."""
        pointer = ref_pointer(ref)
        if pointer is None:
            path = self.anchors.get(unquote(ref[1:]))
            return MISSING if path is None else self.objects[path]
        node: Any = schema
        for part in pointer:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return MISSING
        return node


MISSING = object()


def schema_index(schema: dict[str, Any], *, ids: tuple[str, ...]) -> SchemaIndex:
    """The schema's index, or SchemaTooLarge as soon as a limit is passed (so the walk itself is
    bounded by the limits, not by what was sent). `ids`: the keywords naming an id in this draft."""
    too_deep = SchemaTooLarge(
        "levels of nesting", MAX_SCHEMA_DEPTH, f"it nests deeper than {MAX_SCHEMA_DEPTH}"
    )
    try:  # the size first: the encoder is C, the depth's walk Python
        size = len(
            json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        )
    except RecursionError:
        raise too_deep from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaTooLarge("bytes of JSON", MAX_SCHEMA_BYTES, f"{size:,} bytes of JSON")
    if json_depth_over(schema, MAX_SCHEMA_DEPTH):
        raise too_deep
    index = SchemaIndex()
    subschemas = 0
    for node, path in _schema_nodes(schema):
        subschemas += 1
        if subschemas > MAX_SCHEMA_SUBSCHEMAS:
            raise SchemaTooLarge(
                "schemas within it",
                MAX_SCHEMA_SUBSCHEMAS,
                f"over {MAX_SCHEMA_SUBSCHEMAS:,} schemas within it",
            )
        if not isinstance(node, dict):
            continue
        index.objects[path] = node
        for key in REF_KEYS:
            if isinstance(node.get(key), str):
                index.refs.append((path, node[key]))
        if len(index.refs) > MAX_SCHEMA_REFERENCES:
            raise SchemaTooLarge(
                "references", MAX_SCHEMA_REFERENCES, f"over {MAX_SCHEMA_REFERENCES:,} references"
            )
        for key in ANCHOR_KEYS:
            if isinstance(node.get(key), str):
                index.anchors.setdefault(node[key], path)
        if path:
            index.nested_ids += [node[key] for key in ids if isinstance(node.get(key), str)]
    return index


def _schema_nodes(schema: Any) -> Iterator[tuple[Any, Path]]:
    """Every schema object (and every true or false where a schema may stand) within the schema, by
    its path, in document order: not within the values of data keywords, and a map of names
    (properties...) is not one, though each schema it maps is. Iterative: no recursion limit."""
    stack: list[tuple[Any, Path, bool]] = [(schema, (), False)]
    while stack:
        node, path, names = stack.pop()
        if isinstance(node, bool):
            yield node, path
        elif isinstance(node, dict):
            if not names:
                yield node, path
            children = [
                (value, (*path, key), not names and key in NAMED)
                for key, value in node.items()
                if names or key not in DATA
            ]
            stack.extend(reversed(children))
        elif isinstance(node, list):
            stack.extend(reversed([(item, (*path, str(i)), False) for i, item in enumerate(node)]))


def ref_pointer(ref: str) -> Path | None:
    """A reference's JSON pointer as its parts (None for an anchor)."""
    fragment = unquote(ref[1:])
    if not fragment.startswith("/") and fragment:
        return None
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in fragment.split("/")[1:])


def not_a_schema(ref: str) -> bool:
    """Whether a JSON pointer passes through a keyword whose value is data (enum, const, default,
    examples) or ends at a map of names (properties, $defs...), outside a map of names: what it names
    is not a schema, whatever it looks like."""
    parts = ref_pointer(ref) or ()
    names = False
    for part in parts:
        if not names and part in DATA:
            return True
        names = not names and part in NAMED
    return names


# Keywords whose subschemas apply to the same value as the schema holding them: a chain of them
# (through references) that comes back to where it started checks one value without end, whatever
# the input ({"properties": {"a": {"$ref": "#/properties/a"}}} refuses every input holding "a"). A
# reference through properties or items goes one level down the input, which ends: a tree's schema
# refers to itself that way.
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE = ("not", "if", "then", "else")


def applies_itself(index: SchemaIndex) -> bool:
    """Whether a chain of in-place keywords and references comes back to a schema it left (one
    depth-first walk over the schema objects and their edges)."""
    nodes = index.objects

    def edges(path: Path) -> Iterator[Path]:
        node = nodes.get(path)
        if node is None:
            return
        for key in REF_KEYS:
            ref = node.get(key)
            if isinstance(ref, str) and ref.startswith("#"):
                pointer = ref_pointer(ref)
                found = index.anchors.get(unquote(ref[1:])) if pointer is None else pointer
                if found is not None:
                    yield tuple(found)
        for key in _IN_PLACE_LISTS:
            if isinstance(node.get(key), list):
                yield from ((*path, key, str(i)) for i in range(len(node[key])))
        yield from ((*path, key) for key in _IN_PLACE if isinstance(node.get(key), dict))

    state: dict[Path, int] = {}  # 1: on the current chain, 2: done

    def cycles(start: Path) -> bool:
        stack = [(start, edges(start))]
        state[start] = 1
        while stack:
            path, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                state[path] = 2
                stack.pop()
            elif state.get(step) == 1:
                return True
            elif step not in state:
                state[step] = 1
                stack.append((step, edges(step)))
        return False

    return any(cycles(path) for path in list(nodes) if path not in state)
