"""Who may talk to the service: the API key, the Host names it answers to, and the web origins it admits.

A server on 127.0.0.1 is reachable from every web page the user opens (and, with DNS rebinding, readable). So the
`Host` must name this server (its address, `127.0.0.1`, `localhost`, `[::1]`, or `--allow-host`), a browser's
`Origin` must be its own or one `--allow-origin` admits, and bodies must be `application/json` (no plain HTML form).
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import InputError

LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")


def load_api_key(env_name: str | None = None, key_file: str | Path | None = None) -> str | None:
    """Read the key named by `--api-key-env` or stored in `--api-key-file` (stripped); None when neither is given."""
    if env_name and key_file:
        raise InputError("give --api-key-env or --api-key-file, not both.")
    if env_name:
        key = os.environ.get(env_name, "").strip()
        if not key:
            raise InputError(
                f"--api-key-env {env_name}: that environment variable is unset or empty; export the key first."
            )
        return key
    if key_file:
        key = Path(key_file).read_text(encoding="utf-8").strip()
        if not key:
            raise InputError(f"--api-key-file {key_file}: the file is empty; write the key into it.")
        return key
    return None


def authorized(header: bytes | None, key: bytes) -> bool:
    """Tell whether `header` is exactly `Bearer <key>`; the comparison takes the same time wherever they differ."""
    scheme, _, given = (header or b"").partition(b" ")
    return hmac.compare_digest(given.strip(), key) and scheme.lower() == b"bearer"


def needs_key(method: str, path: str) -> bool:
    """Every request needs the key but /health and GETs of the page and its static files (they hold no data).

    A browser cannot add a header to a page load: the page asks for the key and sends it with its API calls.
    """
    page = method in ("GET", "HEAD") and (path == "/" or path.startswith("/explain/static/"))
    return path != "/health" and not page


def split_host(host: str) -> tuple[str, str | None]:
    """'name:port' → ('name', 'port'); '[::1]:8080' → ('[::1]', '8080'); a bare name has port None."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else None
    name, sep, port = host.rpartition(":")
    return (name, port) if sep else (host, None)


def bracketed(address: str) -> str:
    """Write an IPv6 address as it appears in a Host header ('::1' → '[::1]'); other names unchanged."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def check_allow_hosts(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`--allow-host` values, lower-cased: a name, `name:port`, `[v6]`, or `*`; refuses URLs and empty names."""
    checked = tuple(name.strip().lower() for name in names)
    for name, value in zip(names, checked):
        if not value or "/" in value or " " in value:
            raise InputError(
                f"--allow-host {name!r}: give a host name as clients send it (e.g. bertkit.example.org "
                "or 10.0.0.5:8080), or '*' for any."
            )
    return checked


def check_allow_origins(origins: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`--allow-origin` values: `scheme://host[:port]` without a path (as browsers send them), `null`, or `*`."""
    checked = tuple(origin.strip().rstrip("/").lower() for origin in origins)
    for origin, value in zip(origins, checked):
        parts = urlsplit(value)
        if value not in ("*", "null") and (parts.scheme not in ("http", "https") or not parts.netloc or parts.path):
            raise InputError(
                f"--allow-origin {origin!r}: give an origin as a browser sends it, e.g. "
                "http://localhost:3000 (scheme, host and port; no path), or '*' for any."
            )
    return checked


def host_allowed(host: str | None, server: tuple[str, int] | None, allowed: tuple[str, ...]) -> bool:
    """Tell whether the `Host` header names this server (see the module's notes); `server` is the ASGI scope's."""
    if "*" in allowed:
        return True
    if not host:
        return False
    name, port = split_host(host)
    if host.strip().lower() in allowed or name in allowed:
        return True
    own_name, own_port = (bracketed(str(server[0]).lower()), str(server[1])) if server else (None, None)
    return name in (*LOCAL_NAMES, own_name) and (port is None or port == own_port)


def same_origin(origin: str, host: str | None) -> bool:
    """Tell whether a browser's `Origin` is this server's own: its host and port are the request's `Host`."""
    return bool(host) and urlsplit(origin.lower()).netloc == host.strip().lower()


def origin_allowed(origin: str, allowed: tuple[str, ...]) -> bool:
    """Tell whether `--allow-origin` admits this cross-origin `Origin`."""
    return "*" in allowed or origin.strip().rstrip("/").lower() in allowed


def is_json(content_type: str | None) -> bool:
    """`application/json` (any parameters, e.g. charset) or a `+json` type."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
