"""ClickHouse type strings taken apart: a name and its top-level arguments, and the wrappers
(``Nullable``, ``LowCardinality``) peeled off. Pure; shared by the value rules and the decoders."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ParsedType:
    """A parsed canonical ClickHouse type: its name, arguments and whether null is allowed."""

    name: str
    args: tuple[str, ...]


def split_type(ch_type: str) -> ParsedType:
    """``Name(arg, arg)`` split at its top-level commas (nested parentheses kept whole)."""
    name, _, rest = ch_type.partition("(")
    if not rest:
        return ParsedType(name, ())
    parts, depth, current = [], 0, ""
    for ch in rest[:-1]:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current += ch
    parts.append(current.strip())
    return ParsedType(name, tuple(parts))


def unwrap(ch_type: str) -> tuple[str, bool]:
    """``ch_type`` without ``LowCardinality``/``Nullable`` wrappers, and whether it was Nullable."""
    nullable = False
    while True:
        parsed = split_type(ch_type)
        if parsed.name == "LowCardinality":
            ch_type = parsed.args[0]
        elif parsed.name == "Nullable":
            ch_type, nullable = parsed.args[0], True
        else:
            return ch_type, nullable


__all__ = ["ParsedType", "split_type", "unwrap"]
