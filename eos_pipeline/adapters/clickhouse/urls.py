"""Connection URLs: one string names chDB's data directory or a server, and never leaks a password.

The same ``clickhouse_url`` setting selects the embedded engine or a server, so parsing it is
where a wrong URL is caught, before any connection is tried; everything logged or raised shows
the URL through :func:`redact_url`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import SplitResult, unquote, urlsplit

from eos_pipeline.adapters.clickhouse.errors import ClickHouseSinkError
from eos_pipeline.core.schema import validate_identifier


@dataclass(frozen=True, slots=True)
class ClickHouseTarget:
    """A parsed connection URL. ``display`` is safe to log: the password is masked."""

    scheme: str
    display: str
    path: str | None = None
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None

    @property
    def embedded(self) -> bool:
        return self.scheme == "chdb"


def parse_url(url: str) -> ClickHouseTarget:
    """Parse ``chdb:///abs/path``, ``chdb://rel/path`` or ``http(s)://user:pass@host:port/db``."""
    if not isinstance(url, str) or not url.strip():
        raise ClickHouseSinkError(
            "empty ClickHouse URL: use chdb:///abs/data/path or http(s)://host:port"
        )
    scheme, sep, rest = url.partition(":")
    scheme = scheme.lower()
    if not sep:
        raise ClickHouseSinkError(
            f"ClickHouse URL {redact_url(url)!r} has no scheme: use chdb:///abs/data/path or "
            "http(s)://host:port"
        )
    if scheme == "chdb":
        raw = rest[2:] if rest.startswith("//") else rest
        if "?" in raw or "#" in raw:
            raise ClickHouseSinkError(f"chDB URL {url!r} must not carry a query or fragment")
        if raw in ("", "memory", ":memory:"):
            raise ClickHouseSinkError(
                f"chDB URL {url!r} names no data directory: an in-memory engine forgets its "
                "deduplication log, use chdb:///abs/data/path"
            )
        path = os.path.realpath(os.path.expanduser(raw))
        return ClickHouseTarget(scheme="chdb", display=f"chdb://{path}", path=path)
    if scheme not in ("http", "https"):
        raise ClickHouseSinkError(
            f"unsupported ClickHouse URL scheme {scheme!r} in {redact_url(url)!r}: use "
            "chdb:///abs/data/path, http://host:8123 or https://host:8443"
        )
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ClickHouseSinkError(
            f"ClickHouse URL {redact_url(url)!r}: query parameters are not supported; "
            "pass settings in code"
        )
    try:
        port = parts.port
    except ValueError as ex:
        raise ClickHouseSinkError(f"ClickHouse URL {redact_url(url)!r}: {ex}") from None
    if not parts.hostname:
        raise ClickHouseSinkError(f"ClickHouse URL {redact_url(url)!r} names no host")
    database = unquote(parts.path.strip("/")) or None
    if database is not None:
        validate_identifier(database, "database in the ClickHouse URL")
    return ClickHouseTarget(
        scheme=scheme,
        display=redact_url(url),
        host=parts.hostname,
        port=port or (8443 if scheme == "https" else 8123),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        database=database,
    )


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``, for logs and error messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = f"{parts.username or ''}:***@{parts.hostname or ''}"
        if parts.port is not None:
            netloc += f":{parts.port}"
        return SplitResult(parts.scheme, netloc, parts.path, parts.query, parts.fragment).geturl()
    except ValueError:
        return "<unparseable URL>"


def scrub_password(ex: Exception, target: ClickHouseTarget) -> str:
    """The error's text with the target's password masked (drivers may echo it back)."""
    text = str(ex)
    if target.password:
        text = text.replace(target.password, "***")
    return text
