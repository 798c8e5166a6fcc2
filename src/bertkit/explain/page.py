"""The page as HTML: linked to its static files when served, or one self-contained file with the data inlined."""

from __future__ import annotations

import json
import re
from importlib.resources import files
from pathlib import Path

STATIC_FILES = {"page.js": "text/javascript", "page.css": "text/css", "plotly.min.js": "text/javascript"}
STATIC_URL = "explain/static"  # relative: the page works under any prefix the server is mounted at


def static_path(name: str) -> Path:
    """Return the file behind a static name: page.html / .js / .css in this package, plotly.min.js in plotly's wheel."""
    if name == "plotly.min.js":
        return Path(str(files("plotly") / "package_data" / "plotly.min.js"))
    return Path(str(files("bertkit.explain") / "static" / name))


def static_text(name: str) -> str:
    """Read a static file (`static_path`)."""
    return static_path(name).read_text(encoding="utf-8")


LIVE_TITLE = "the visual guide, live"
SAVED_TITLE = "the visual guide, saved"


def live_page() -> str:
    """page.html linking its scripts and style from the server; the page fetches the data itself."""
    return _fill(
        style=f'<link rel="stylesheet" href="{STATIC_URL}/page.css">',
        data="",
        scripts=f'<script src="{STATIC_URL}/plotly.min.js"></script>\n<script src="{STATIC_URL}/page.js"></script>',
    )


def offline_page(info: dict, result: dict) -> str:
    """One HTML file holding the style, plotly.js, the page script and the data: it opens from disk with no network."""
    data = json.dumps({"info": info, "result": result}, separators=(",", ":"))
    page = _fill(
        style=f"<style>\n{static_text('page.css')}\n</style>",
        data=f'<script id="bertkit-data" type="application/json">{_json_safe(data)}</script>',
        scripts="\n".join(
            f"<script>\n{_script_safe(static_text(name))}\n</script>" for name in ("plotly.min.js", "page.js")
        ),
    )
    return page.replace(LIVE_TITLE, SAVED_TITLE)  # a saved file is one sentence's answer, not a live page


def _fill(style: str, data: str, scripts: str) -> str:
    page = static_text("page.html")
    return page.replace("<!--STYLE-->", style).replace("<!--DATA-->", data).replace("<!--SCRIPTS-->", scripts)


# JSON's own escapes for what could end or change a <script> element (or a JS string, U+2028/9): JSON.parse reads
# them back as the same characters, and in JSON these characters only ever stand inside a string
_JSON_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})
_SCRIPT_END = re.compile(r"<(?=/script|!--)", re.IGNORECASE)


def _json_safe(text: str) -> str:
    r"""JSON text for a `type="application/json"` script element: `<`, `>`, `&` and U+2028/9 only as `\uXXXX`."""
    return text.translate(_JSON_ESCAPES)


def _script_safe(text: str) -> str:
    r"""JavaScript that cannot end its <script> element early: `</script`, `<!--` become `<\/script`, `<\!--`."""
    return _SCRIPT_END.sub(r"<\\", text)
