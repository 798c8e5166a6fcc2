"""MkDocs hook: the HTTP reference's table of operations, generated from the service's own OpenAPI document.

`<!-- openapi-table -->` in a page becomes one row per operation of `bertkit serve` (the packaged model, default
settings): its method and route, its summary, the top-level fields of its JSON body and the statuses it answers.
Generated at build time, so the page cannot drift from the code.
"""

from __future__ import annotations

MARKER = "<!-- openapi-table -->"
METHODS = ("get", "post", "put", "delete")


def _fields(operation: dict, components: dict) -> str:
    schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if "$ref" in schema:
        schema = components.get(schema["$ref"].rsplit("/", 1)[-1], {})
    required = set(schema.get("required", ()))
    names = [f"**`{n}`**" if n in required else f"`{n}`" for n in schema.get("properties", {})]
    return ", ".join(names) or "–"


def operations_table(document: dict) -> str:
    """A Markdown table of the document's operations, in the order the service declares its routes."""
    components = document.get("components", {}).get("schemas", {})
    rows = ["| operation | what | body fields (**required**) | answers |", "|---|---|---|---|"]
    for path, item in document.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            summary = (operation.get("summary") or "").replace("|", "\\|")
            statuses = ", ".join(sorted(operation.get("responses", {})))
            route = f"`{method.upper()} {path}`"
            rows.append(f"| {route} | {summary} | {_fields(operation, components)} | {statuses} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' hook signature
    if MARKER not in markdown:
        return markdown
    from bertkit.serve.app import create_app

    return markdown.replace(MARKER, operations_table(create_app().openapi()))
