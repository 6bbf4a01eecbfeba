"""When ClickHouse may parse a chunk's JSON itself, and the checks that keep its verdict ours.

ClickHouse's ``JSONEachRow`` parser spares the Python side Arrow's decode (whether that is
cheaper overall is measured in benchmarks/README.md), but it is more lenient than the decoder
contract (:mod:`core.contract`), measured with chDB 26.9: it reads ``"1"`` and ``true`` into an
Int column, wraps ``300`` into Int8 as 44, reads ``1``/``0`` as Bool, ``+1``, ``01``, ``.5`` and
``1.`` as numbers, ``\\q`` as ``q`` in a string, raw control characters inside strings, and
``{..} {..}`` or ``{..},{..}`` on one line as two rows; and ``-0`` is -0.0 to it, 0 to Python.
With numbers read as strings it also takes an unquoted ``-inf``, ``+nan`` or ``-Infinity`` (any
case) into a String column.
So the native path must agree with the reference or refuse:

* per schema (:func:`native_plan`): only the column types whose every leniency is closed below
  (integers up to 64 bits, Float64, Bool, String, with LowCardinality/Nullable and defaults);
  any other type keeps the schema on the Arrow and per-record paths;
* per chunk, before anything is sent (:func:`native_payload`): bulk byte scans refuse a chunk
  with a tombstone, a value not shaped ``{...}``, any control byte (so each value is exactly one
  line), invalid UTF-8, an unpaired surrogate escape, or an escape other than JSON's; and
  they count the quoted values (:class:`NativePayload`);
* per row, inside ClickHouse (the adapter's SQL): every column is read as text, numbers and bools
  as their raw token (``input_format_json_read_numbers_as_strings``), so an integer must print
  back as itself (no ``+1``, ``01``, ``1.0``, ``-0``) within its column's range, a float must
  match JSON's number grammar, a bool be ``true`` or ``false``; the quoted values the bytes hold
  must be exactly the non-null String values (so no ``"1"`` in a number column, no ``1`` in a
  String column, and no String value spelled like an unquoted token: a number, a signed word,
  ``true``/``false``); a required field may not be missing or null (a required column is read as
  a non-Nullable String, so ClickHouse refuses the row itself); no row may lie beyond the
  chunk's count; an unknown or repeated key is a parse error. Any of these makes the INSERT
  throw before it writes anything.

Whatever is refused takes the existing path (Arrow bulk, else the per-record reference, which
names the dead letters), so the rows of a chunk are the same whichever path wrote them.
"""

from __future__ import annotations

import functools
import mmap
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eos_pipeline.core.contract import compile_contract, unwrap
from eos_pipeline.core.decode import json_lines, lines_framed, unpaired_surrogate
from eos_pipeline.core.schema import SourceColumns, TableSchema
from eos_pipeline.core.values import INT_RANGES

# A backslash escape JSON does not have; ``\\u`` must be followed by four hex digits.
_BAD_ESCAPE = re.compile(rb'\\(?:[^"\\/bfnrtu]|u(?![0-9a-fA-F]{4}))')


@dataclass(frozen=True, slots=True)
class NativeColumn:
    """How ClickHouse reads one payload column and what a row's value must satisfy."""

    name: str
    #: ``string``: read as a String (ClickHouse refuses every non-string token); ``int``,
    #: ``float``, ``bool``: read as ``Dynamic`` and checked by token type (and range).
    kind: str
    #: The declared base type (``Int8``, ``Float64``, ``Bool``, ``String``).
    base: str
    #: Inclusive bounds of an integer column.
    low: int | None
    high: int | None
    #: The contract's default for a missing or null field (``has_default``), else NULL if
    #: ``nullable``, else the field is required.
    default: Any
    has_default: bool
    nullable: bool

    @property
    def required(self) -> bool:
        return not self.has_default and not self.nullable


@dataclass(frozen=True, slots=True)
class NativePlan:
    columns: tuple[NativeColumn, ...]


def _kind(base: str) -> str | None:
    if base in INT_RANGES:  # 8 to 64 bits
        return "int"
    return {"Float64": "float", "Bool": "bool", "String": "string"}.get(base)


@functools.lru_cache(maxsize=64)
def native_plan(schema: TableSchema) -> NativePlan | None:
    """How ClickHouse parses ``schema``'s payload, or None when a column type is not vouched for.

    Float32 is left out (ClickHouse and Python may round a decimal to float32 differently), and
    so are dates, times, decimals, UUIDs, IPs, FixedString and containers.
    """
    if schema.format.kind.framed:
        return None  # ClickHouse parses JSON lines only; framed values are decoded per record
    contract = compile_contract(schema)
    columns = []
    for col, rule in zip(schema.columns, contract.fields, strict=True):
        base = unwrap(col.ch_type)[0]
        kind = _kind(base)
        if kind is None or col.name.startswith("__eos"):  # the SQL's own names
            return None
        low, high = INT_RANGES[base] if kind == "int" else (None, None)
        columns.append(
            NativeColumn(
                col.name, kind, base, low, high, rule.default, rule.has_default, rule.nullable
            )
        )
    return NativePlan(tuple(columns))


@dataclass(frozen=True, slots=True)
class NativeRows:
    """The source columns of a chunk's rows: one offset and Kafka timestamp per JSON line."""

    source: SourceColumns
    topic: str
    partition: int
    offsets: Sequence[int]
    timestamps_ms: Sequence[int]


@dataclass(frozen=True, slots=True)
class NativePayload:
    """A chunk ready for ClickHouse: its values as JSON lines, and how many quoted values it has.

    ``quoted`` counts the ``:"`` and ``: "`` in the bytes. Every value that is a JSON string adds
    exactly one (a chunk with ``:`` followed by two spaces is refused, and control bytes are), a
    quote inside a string is escaped (``\\"``), so only a string ending in ``:`` adds more. The
    INSERT requires ``quoted`` to equal the number of non-null values of String columns: then no
    number or bool column got a quoted value, and no String column an unquoted one.
    """

    #: The values joined by newlines: bytes, or a memory map of the file ClickHouse reads.
    data: bytes | mmap.mmap
    quoted: int


def native_payload(
    values: Sequence[bytes | None], data: bytes | mmap.mmap | None = None
) -> NativePayload | None:
    """The chunk for ClickHouse's parser, or None to take another path.

    ``data`` is ``b"\\n".join(values)`` when the caller already wrote it somewhere (the adapter
    writes the values straight into the file ClickHouse reads and passes a memory map of it,
    sparing a 40 MB join per chunk); without it the values are joined here. Only bulk scans (no
    Python loop over the records). None is never a verdict on a record; the caller runs the
    other decoders on the same values.
    """
    joined = None
    if data is None:
        data = joined = json_lines(values)
        if data is None:
            return None
    elif not values or not lines_framed(values, data):
        return None
    raw = np.frombuffer(data, np.uint8)
    # The joins are the only control bytes: each value is one line, and no string holds a raw
    # control character (JSON forbids them, ClickHouse keeps them). As signed bytes, everything
    # beyond ASCII is below 0x20 too: one count proves both, the common case.
    if _count_below(raw.view(np.int8), 0x20) != len(values) - 1:
        if _count_below(raw, 0x20) != len(values) - 1:
            return None
        if joined is None and not _valid_utf8(data):
            return None  # (``json_lines`` checked the bytes it joined)
    if data.find(b"\\") >= 0 and (
        _BAD_ESCAPE.search(data) or (joined is None and unpaired_surrogate(data))
    ):
        return None
    if not _pairs(raw, b": "):
        # Compact separators (the common case): count ``:"`` as 16-bit words at both alignments.
        quoted = _pairs(raw, b':"')
    else:
        # What follows each ``:`` (numpy over the colons: multi-byte searches are slow in Python).
        colons = np.flatnonzero(raw[:-2] == ord(":"))
        first, second = raw[colons + 1], raw[colons + 2]
        space = first == ord(" ")
        if (space & (second == ord(" "))).any():
            return None  # a value after two spaces would escape the count of quoted values
        quoted = int(np.count_nonzero(first == ord('"'))) + int(
            np.count_nonzero(space & (second == ord('"')))
        )
    return NativePayload(data, quoted)


def _valid_utf8(data: mmap.mmap) -> bool:
    try:
        str(data, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


#: Bulk scans go block by block through one small reused buffer: a temporary as large as the
#: chunk (40 MB) costs more in fresh pages than the comparison itself.
_BLOCK = 1 << 20


def _count_below(raw: np.ndarray, limit: int) -> int:
    """How many elements of the 1-d array ``raw`` are below ``limit``."""
    buf = np.empty(min(_BLOCK, raw.size), bool)
    count = 0
    for start in range(0, raw.size, _BLOCK):
        part = raw[start : start + _BLOCK]
        out = buf[: part.size]
        np.less(part, limit, out=out)
        count += int(np.count_nonzero(out))
    return count


def _pairs(raw: np.ndarray, pair: bytes) -> int:
    """How often the two bytes ``pair`` occur in ``raw`` (they cannot overlap: distinct bytes)."""
    assert len(pair) == 2 and pair[0] != pair[1]
    word = int.from_bytes(pair, "little")
    half = _BLOCK // 2
    buf = np.empty(min(half, raw.size // 2 + 1), bool)
    count = 0
    for align in (0, 1):  # 16-bit words at both alignments
        words = raw[align : align + (raw.size - align) // 2 * 2].view("<u2")
        for start in range(0, words.size, half):
            part = words[start : start + half]
            out = buf[: part.size]
            np.equal(part, word, out=out)
            count += int(np.count_nonzero(out))
    return count


__all__ = [
    "NativeColumn",
    "NativePayload",
    "NativePlan",
    "NativeRows",
    "native_payload",
    "native_plan",
]
