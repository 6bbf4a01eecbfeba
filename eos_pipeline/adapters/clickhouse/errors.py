"""ClickHouse failures turned into one error type whose message says what to fix.

Callers (the sinks, the resources, the CLI) catch :class:`ClickHouseSinkError` only, and decide
from ``retryable`` whether sending the same idempotent insert again may help; the driver's own
exception classes and numeric codes stay inside this package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from clickhouse_connect.driver.exceptions import Error as CHError
from clickhouse_connect.driver.exceptions import OperationalError

UNKNOWN_TABLE = 60
UNKNOWN_DATABASE = 81
READONLY = 164
# Server error codes worth retrying: an idempotent insert can simply be sent again.
RETRYABLE_CODES = frozenset({159, 202, 209, 210, 242, 252, 319, 999})


class ClickHouseSinkError(RuntimeError):
    """A ClickHouse problem, phrased as what to fix; ``retryable`` when sending again may help."""

    def __init__(self, message: str, *, code: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


@contextlib.contextmanager
def explained_errors(
    action: str, target: str, database: str | None = None, table: str | None = None
) -> Iterator[None]:
    """Re-raise driver errors met while doing ``action`` on ``target`` as ClickHouseSinkError."""
    try:
        yield
    except OperationalError as ex:
        raise ClickHouseSinkError(
            f"{action}: cannot reach ClickHouse at {target} ({ex}); check that the "
            "server is running and reachable",
            retryable=True,
        ) from ex
    except CHError as ex:
        code = ex.code
        where = f"{database}.{table}" if table else database
        if code == UNKNOWN_TABLE:
            message = (
                f"{action}: table {where} does not exist on {target}; create it first "
                "with ensure_table() (the pipeline's setup step) or fix the table name"
            )
        elif code == UNKNOWN_DATABASE:
            message = (
                f"{action}: database {database} does not exist on {target}; create it "
                "with ensure_table() or fix the database name"
            )
        elif code == READONLY:
            message = (
                f"{action}: ClickHouse at {target} is read-only for this user; use a "
                f"user allowed to write ({ex})"
            )
        else:
            message = f"{action} on {target} failed: {ex}"
        raise ClickHouseSinkError(message, code=code, retryable=code in RETRYABLE_CODES) from ex
