"""ClickHouse parses a chunk's JSON itself: the INSERT ... SELECT and the checks inside it.

The chunk's values are written to a staging file (newline-separated, straight from the list of
values; one file per process, written over by each chunk), checked by
:func:`eos_pipeline.core.decode.native_payload` over a memory map of it, and read with
``file(path, JSONEachRow, structure)``; the source columns come from query parameters (topic,
partition) and, per row, from a second file holding the offsets and Kafka timestamps as
little-endian Int64s, read once as one string (a query parameter of 25,000 packed numbers cost ~35
ms of CPU to pass, a third of the insert; the file costs nothing measurable). One INSERT, one block,
under the caller's settings (dedup token and the one-block settings of
:meth:`ClickHouseSink.insert_settings`), exactly like the other paths, so a retried step
deduplicates against a block written by any of them.

Every column is read as text (numbers and bools as their raw token) and each row must pass the
checks of ``WHERE throwIf(...)`` (listed in :mod:`eos_pipeline.core.decode`); the count of
quoted values is compared over the whole chunk with a window sum. Unknown and repeated keys are
parse errors (``input_format_skip_unknown_fields=0``). Any error means "not this path": the
INSERT throws before writing its block, and the caller takes the next path.

Only for chDB: ``file()`` reads the engine's own file system, which a server does not share.
"""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import Error as CHError

from eos_pipeline.adapters.clickhouse.ddl import literal
from eos_pipeline.core.decode import (
    NativeColumn,
    NativePlan,
    NativeRows,
    native_payload,
)
from eos_pipeline.core.schema import SourceColumns, quote_identifier, validate_identifier

#: The row number column of the inner SELECT (``native_plan`` refuses payload names like it).
_ROW = "__eos_row"
_QUOTED = "__eos_quoted"
#: The chunk's offsets, then its Kafka timestamps, as one string of little-endian Int64s.
_SOURCE = "__eos_source"

#: JSONEachRow reading every column as text: numbers and bools as their raw token, checked in SQL.
_PARSE_SETTINGS: dict[str, Any] = {
    "input_format_skip_unknown_fields": 0,
    "input_format_json_read_numbers_as_strings": 1,
    "input_format_json_read_bools_as_strings": 1,
    "input_format_json_read_objects_as_strings": 0,
    "input_format_json_read_arrays_as_strings": 0,
    "input_format_json_empty_as_default": 0,
    "input_format_null_as_default": 0,
    "input_format_force_null_for_omitted_fields": 1,
    "input_format_allow_errors_num": 0,
    "input_format_allow_errors_ratio": 0,
    "precise_float_parsing": 1,
    "max_threads": 1,
    "max_insert_threads": 1,
}
# Every spelling ClickHouse reads as a number (JSON's, plus ``+1``, ``01``, ``.5``, ``1.``), and
# a signed word: it reads ``-inf``, ``+nan``, ``-Infinity`` (any case) into a String column too.
_NUMERAL = r"^[-+]?[0-9]*\\.?[0-9]*([eE][-+]?[0-9]*)?$|^[-+][A-Za-z]"
#: First bytes of those spellings and of ``true``/``false`` (``+ - . 0-9 f t``): only a value
#: starting with one of them needs the pattern (``ascii`` is much cheaper than ``match``).
_TOKEN_STARTS = "43, 45, 46, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 102, 116"
# JSON's number grammar (RFC 8259), for Float64 columns (integers print back as themselves).
_JSON_NUMBER = r"^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?$"


class NativeRefused(Exception):
    """ClickHouse refused the chunk (a check or a parse error): take another path."""


def _check(col: NativeColumn) -> str:
    """What a row's raw text must satisfy (beyond parsing and the quote count)."""
    x = quote_identifier(col.name)
    if col.kind == "string":
        # Text an unquoted number or bool could have become (numbers are read as strings for
        # every column): refused, so every String value was quoted and the quote count holds.
        ok = (
            f"NOT (ascii({x}) IN ({_TOKEN_STARTS}) "
            f"AND ({x} IN ('true', 'false') OR match({x}, '{_NUMERAL}')))"
        )
    elif col.kind == "bool":
        ok = f"{x} IN ('true', 'false')"
    elif col.kind == "float":
        # ``-0`` is the integer 0 to the reference (stored 0.0), -0.0 to ClickHouse
        ok = f"match({x}, '{_JSON_NUMBER}') AND {x} != '-0'"
    else:
        assert col.low is not None and col.high is not None
        wide = "UInt64" if col.base.startswith("U") else "Int64"
        number = f"to{wide}OrNull({x})"
        ok = f"toString({number}) = {x} AND {number} BETWEEN {col.low} AND {col.high}"
    # A required column is read as String, not Nullable: ClickHouse refuses the row when the
    # field is null or missing (``input_format_null_as_default = 0``,
    # ``input_format_force_null_for_omitted_fields = 1``), so no per-row null check is needed.
    return ok if col.required else f"(isNull({x}) OR ({ok}))"


def _value(col: NativeColumn, index: int) -> str:
    x = quote_identifier(col.name)
    if col.required:
        if col.kind == "string":
            return x
        return f"{x} = 'true'" if col.kind == "bool" else f"CAST({x} AS {col.base})"
    if col.kind == "string":
        value = x
    elif col.kind == "bool":
        value = f"if(isNull({x}), NULL, {x} = 'true')"
    else:
        value = f"CAST({x} AS Nullable({col.base}))"
    if col.has_default:
        return f"ifNull({value}, {{d{index}:{col.base}}})"
    return value


def native_insert_sql(
    ref: str, plan: NativePlan, source: SourceColumns, settings: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The INSERT ... SELECT for ``plan`` and its constant parameters (defaults, structure)."""
    names = [source.topic, source.partition, source.offset]
    exprs = ["{topic:String}", "{partition:Int32}", _nth(_ROW)]
    if source.timestamp is not None:
        names.append(source.timestamp)
        exprs.append(f"fromUnixTimestamp64Milli({_nth(f'{{count:UInt64}} + {_ROW}')}, 'UTC')")
    structure = ", ".join(
        f"{quote_identifier(c.name)} {'String' if c.required else 'Nullable(String)'}"
        for c in plan.columns
    )
    params: dict[str, Any] = {"structure": structure}
    for name in settings:
        validate_identifier(name, "setting name")
    # Quoted values the rows hold: one per required String column and row, plus the non-null
    # values of the optional ones (a window sum over the chunk, only when there are any).
    required = sum(1 for c in plan.columns if c.kind == "string" and c.required)
    optional = [
        f"isNotNull({quote_identifier(c.name)})"
        for c in plan.columns
        if c.kind == "string" and not c.required
    ]
    quoted = f"{{count:UInt64}} * {required}"
    if optional:
        quoted += f" + {_QUOTED}"
    checks = [f"{_ROW} <= {{count:UInt64}}", f"{quoted} = {{quoted:UInt64}}"]
    for i, col in enumerate(plan.columns):
        names.append(col.name)
        exprs.append(_value(col, i))
        checks.append(_check(col))
        if col.has_default:
            params[f"d{i}"] = col.default
    sql = (
        f"INSERT INTO {ref} ({', '.join(quote_identifier(n) for n in names)}) "
        f"SETTINGS {', '.join(f'{name} = {literal(value)}' for name, value in settings.items())} "
        f"WITH (SELECT raw_blob FROM file({{source:String}}, 'RawBLOB')) AS {_SOURCE} "
        f"SELECT {', '.join(exprs)} FROM ("
        + (f"SELECT *, sum({' + '.join(optional)}) OVER () AS {_QUOTED} FROM (" if optional else "")
        + f"SELECT *, rowNumberInAllBlocks() + 1 AS {_ROW} "
        "FROM file({path:String}, 'JSONEachRow', {structure:String}))"
        + (") " if optional else " ")
        +
        # ifNull: a check that is NULL (an integer beyond Int64, say) must refuse, not filter
        f"WHERE throwIf(NOT ifNull({' AND '.join(checks)}, 0), 'refused by native JSON') = 0"
    )
    return sql, params


def insert_native(
    client: Client,
    ref: str,
    plan: NativePlan,
    values: Sequence[bytes | None],
    rows: NativeRows,
    settings: dict[str, Any],
) -> None:
    """Insert ``values`` (one JSON object per offset) as one block; :class:`NativeRefused` if
    their bytes or any line is not one ClickHouse may parse for us (nothing is written then).
    No joined copy of the chunk in Python (see the module docstring); one insert at a time per
    process."""
    known = client.server_settings
    unknown = sorted(set(_PARSE_SETTINGS) - set(known))
    if unknown:  # each of them closes a leniency: without one, the checks prove less
        raise NativeRefused(f"this ClickHouse lacks the settings {unknown}")
    if not values:
        raise NativeRefused("no values")
    merged = {k: v for k, v in {**settings, **_PARSE_SETTINGS}.items() if k in known}
    sql, params = native_insert_sql(ref, plan, rows.source, merged)
    directory = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    with _STAGING_LOCK:
        staging = _staging(directory)
        lines, source = staging.fds
        try:
            try:
                size = _rewrite(lines, lambda fd: _write_lines(fd, values))
            except TypeError:  # a tombstone (None)
                raise NativeRefused("a value is not bytes") from None
            quoted = _scanned(values, lines, size)
            if quoted is None:
                raise NativeRefused("the bytes are not ones ClickHouse may parse for us")
            packed = np.asarray([*rows.offsets, *rows.timestamps_ms], dtype="<i8").tobytes()
            _rewrite(source, lambda fd: _write_all(fd, packed))
            params.update(
                path=staging.paths[0],
                source=staging.paths[1],
                topic=rows.topic,
                partition=rows.partition,
                count=len(rows.offsets),
                quoted=quoted,
            )
            try:
                client.command(sql, parameters=params)
            except CHError as ex:  # a check, a parse error: they look alike, and write nothing
                raise NativeRefused(str(ex)[:300]) from ex
        finally:
            if os.fstat(lines).st_size > KEEP_BYTES:
                os.ftruncate(lines, 0)  # an outsized chunk's pages are not kept


#: Staging files are named ``eos-native-<pid>-<random>``: the pid tells whose they are.
_PREFIX = "eos-native-"
#: A staging file is rewritten by every INSERT of its process and removed when the process
#: exits; one this old whose writer is gone was left by a killed run. (The age also guards
#: against a pid of another pid namespace.)
STALE_AFTER_S = 300.0
#: A process keeps its staging file's pages between inserts up to this size (a chunk of 25,000
#: records of 1.6 KB is 40 MB); a larger chunk's are freed after its insert.
KEEP_BYTES = 64 << 20


class _Staging:
    """A process's two staging files (the values, then the offsets and timestamps), written
    over chunk after chunk. Writing into pages ``/dev/shm`` already holds, instead of a fresh
    file per chunk, spares allocating, zeroing and freeing them: ~15 ms of CPU per 40 MB chunk
    (a third of the Python side's file work)."""

    def __init__(self, directory: str) -> None:
        self.pid = os.getpid()
        self.paths: list[str] = []
        self.fds: list[int] = []
        for suffix in (".jsonl", ".src"):
            prefix = f"{_PREFIX}{self.pid}-"
            fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
            self.fds.append(fd)
            self.paths.append(path)

    def remove(self) -> None:
        """Close and unlink the files (at exit; only by the process that made them)."""
        if os.getpid() != self.pid:
            return
        for fd, path in zip(self.fds, self.paths, strict=True):
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)


_STAGING_LOCK = threading.Lock()
_STAGED: dict[str, _Staging] = {}


def _staging(directory: str) -> _Staging:
    """This process's staging files in ``directory`` (made at its first insert; a forked child
    makes its own: the parent's are the parent's)."""
    staging = _STAGED.get(directory)
    if staging is None or staging.pid != os.getpid():
        sweep_stale(directory)
        staging = _STAGED[directory] = _Staging(directory)
        atexit.register(staging.remove)
    return staging


def _rewrite(fd: int, write: Callable[[int], int]) -> int:
    """Write ``fd`` from its start with ``write`` and cut it to what was written."""
    os.lseek(fd, 0, os.SEEK_SET)
    size = write(fd)
    os.ftruncate(fd, size)
    return size


def _write_all(fd: int, data: bytes | memoryview) -> int:
    """Write all of ``data`` at ``fd``'s position (``os.write`` may write less)."""
    rest = memoryview(data)
    while rest:
        rest = rest[os.write(fd, rest) :]
    return len(data)


def sweep_stale(directory: str | Path, now: float | None = None) -> list[Path]:
    """Remove staging files left by processes that died mid-insert (a SIGKILLed run cannot
    unlink its own; in ``/dev/shm`` they hold memory until a reboot). Returns what went."""
    now = time.time() if now is None else now
    removed = []
    for path in Path(directory).glob(f"{_PREFIX}*"):
        pid_text = path.name[len(_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime >= STALE_AFTER_S:
                path.unlink()
                removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


#: Map every page at once (one call) instead of taking a fault per page on the first scan.
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
#: Buffers per ``writev`` call (the kernel's limit, 1024 on Linux).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def _write_lines(fd: int, values: Sequence[bytes | None]) -> int:
    """Write the values joined by newlines to ``fd``, the kernel copying from each value."""
    parts: list[bytes | None] = [b"\n"] * (2 * len(values) - 1)
    parts[0::2] = values
    written = 0
    for start in range(0, len(parts), _IOV_MAX):
        batch = parts[start : start + _IOV_MAX]
        done = os.writev(fd, batch)  # type: ignore[arg-type]
        want = sum(map(len, batch))  # type: ignore[arg-type]
        if done != want:  # a short write: the rest of this batch, plainly
            _write_all(fd, memoryview(b"".join(batch))[done:])  # type: ignore[arg-type]
        written += want
    return written


def _scanned(values: Sequence[bytes | None], fd: int, size: int) -> int | None:
    """:func:`native_payload`'s count of quoted values, over a memory map of the ``size`` bytes
    just written to ``fd``; None when the bytes need another path."""
    if size == 0:
        return None
    view = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)
    try:
        payload = native_payload(values, view)
        return None if payload is None else payload.quoted
    finally:
        # BufferError: an exception's traceback still holds a numpy view of the map
        with contextlib.suppress(BufferError):
            view.close()


def _nth(index: str) -> str:
    """The ``index``-th (from 1) Int64 of the source file."""
    return f"reinterpretAsInt64(substring({_SOURCE}, 8 * ({index}) - 7, 8))"
