"""MkDocs hook: the REST API reference, rendered at build time from Keeper's own OpenAPI schema.

`manage.py spectacular` writes the schema `/api/schema/` serves, offline: the settings get
placeholder service URLs that nothing connects to (as `make lint` gives mypy). The hook adds two
generated files to the site: `reference/openapi.json` (the schema itself, for client generators)
and `reference/api-routes.md` (every route with its parameters, body, answers and schemas).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
PAGE = "reference/api-routes.md"
SCHEMA_FILE = "reference/openapi.json"
PLACEHOLDERS = {
    "DJANGO_SETTINGS_MODULE": "config.settings.test",
    "DATABASE_URL": "postgresql://docs@localhost:1/docs",
    "REDIS_URL": "redis://localhost:1/0",
}
METHODS = ("get", "post", "put", "patch", "delete")
GROUPS = {
    "runs": "Runs",
    "approvals": "Approvals",
    "operations": "Operations",
    "schedules": "Schedules",
    "workflows": "Workflows",
    "workers": "The worker protocol",
    "webhooks": "Webhooks",
    "memory": "Memory",
    "erasure-requests": "Erasure requests",
    "retrieval": "Retrieval",
}


def schema_generate() -> dict[str, Any]:
    """The OpenAPI document, as `manage.py spectacular` writes it."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "openapi.json"
        env = {**os.environ, **PLACEHOLDERS}
        done = subprocess.run(
            [sys.executable, "manage.py", "spectacular", "--format", "openapi-json", "--file", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0 or not out.exists():
            raise PluginError(f"manage.py spectacular failed:\n{done.stderr[-3000:]}")
        schema: dict[str, Any] = json.loads(out.read_text())
        return schema


def _anchor(name: str) -> str:
    return "schema-" + name.lower()


def type_of(schema: dict[str, Any]) -> str:
    """A schema in a few words, with links to the named schemas it uses."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    for combined in ("allOf", "oneOf", "anyOf"):
        if combined in schema:
            words = " or ".join(type_of(s) for s in schema[combined])
            return words + (" or null" if schema.get("nullable") else "")
    kind = schema.get("type")
    if kind == "array":
        words = "array of " + type_of(schema.get("items", {}))
    elif "enum" in schema:
        words = "one of " + ", ".join(f"`{v}`" for v in schema["enum"] if v not in ("", None))
    elif kind:
        words = str(kind) + (f" ({schema['format']})" if "format" in schema else "")
        if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
            words += " of " + type_of(schema["additionalProperties"])
    else:
        words = "any JSON"
    return words + (" or null" if schema.get("nullable") else "")


def _limits(schema: dict[str, Any]) -> str:
    parts = []
    for key, word in (("minLength", "min length"), ("maxLength", "max length"), ("minimum", "min")):
        if key in schema and abs(schema[key]) < 2**31:
            parts.append(f"{word} {schema[key]}")
    if "maximum" in schema and abs(schema["maximum"]) < 2**31:
        parts.append(f"max {schema['maximum']}")
    if "default" in schema and schema["default"] not in ("", None):
        parts.append(f"default `{json.dumps(schema['default'])}`")
    return "; ".join(parts)


def _cell(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines()]
    return " ".join(line for line in lines if line and not line.startswith("* `")).replace("|", "\\|")


def _properties(schema: dict[str, Any]) -> list[str]:
    props = schema.get("properties") or {}
    if not props:
        return []
    required = set(schema.get("required") or ())
    rows = ["| field | type | required | notes |", "|---|---|---|---|"]
    for name, prop in props.items():
        notes = "; ".join(p for p in (_cell(prop.get("description", "")), _limits(prop)) if p)
        if prop.get("readOnly"):
            notes = "read only" + (f"; {notes}" if notes else "")
        rows.append(f"| `{name}` | {type_of(prop)} | {'yes' if name in required else ''} | {notes} |")
    return rows


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### {method.upper()} `{path}`", ""]
    if op.get("summary"):
        lines += [op["summary"].strip(), ""]
    if op.get("description"):
        lines += [op["description"].strip(), ""]
    schemes = sorted({name for option in op.get("security", []) for name in option})
    if schemes:
        words = {"ApiKey": "an API key", "cookieAuth": "a staff session"}
        lines += ["Authentication: " + " or ".join(words.get(s, s) for s in schemes) + ".", ""]
    params = op.get("parameters") or []
    if params:
        lines += ["| parameter | in | type | required | notes |", "|---|---|---|---|---|"]
        for p in params:
            schema = p.get("schema", {})
            notes = "; ".join(x for x in (_cell(p.get("description", "")), _limits(schema)) if x)
            required = "yes" if p.get("required") else ""
            lines.append(f"| `{p['name']}` | {p['in']} | {type_of(schema)} | {required} | {notes} |")
        lines.append("")
    body = (op.get("requestBody") or {}).get("content") or {}
    if body:
        media = "application/json" if "application/json" in body else next(iter(body))
        lines += [f"Body ({media}): {type_of(body[media].get('schema', {}))}", ""]
    answers = []
    for code, answer in (op.get("responses") or {}).items():
        content = answer.get("content") or {}
        shape = ""
        if content:
            media = next(iter(content))
            shape = " " + type_of(content[media].get("schema", {}))
        text = _cell(answer.get("description", ""))
        answers.append(f"- **{code}**{shape}" + (f": {text}" if text else ""))
    if answers:
        lines += ["Answers:", "", *answers, ""]
    return lines


def page_render(schema: dict[str, Any]) -> str:
    info = schema.get("info", {})
    lines = [
        "# REST API routes",
        "",
        f"Every route of {info.get('title', 'the API')} {info.get('version', '')}, rendered from the "
        "OpenAPI schema when this site was built (`manage.py spectacular`, the same document a running",
        "Keeper serves at `/api/schema/`). Download it as [openapi.json](openapi.json). The conventions every",
        "route shares (keys, tenants, errors, rate limits) are in [REST API](rest-api.md).",
        "",
    ]
    grouped: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in schema.get("paths", {}).items():
        segment = path.removeprefix("/api/v1/").split("/", 1)[0]
        for method in METHODS:
            if method in item:
                grouped.setdefault(segment, []).append((path, method, item[method]))
    order = [g for g in GROUPS if g in grouped] + sorted(g for g in grouped if g not in GROUPS)
    for segment in order:
        lines += [f"## {GROUPS.get(segment, segment)}", ""]
        for path, method, op in grouped[segment]:
            lines += _operation(path, method, op)
    lines += ["## Schemas", ""]
    for name, component in sorted(schema.get("components", {}).get("schemas", {}).items()):
        lines += [f"### {name} {{#{_anchor(name)}}}", ""]
        if component.get("description"):
            lines += [_cell(component["description"]), ""]
        rows = _properties(component)
        if rows:
            lines += [*rows, ""]
        elif "properties" not in component:
            lines += [type_of(component), ""]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    schema = schema_generate()
    files.append(File.generated(config, PAGE, content=page_render(schema)))
    files.append(File.generated(config, SCHEMA_FILE, content=json.dumps(schema, indent=1)))
    return files
