"""Queries by Kafka source coordinates (topic, partition, offset range) on a sink table: the
reads that prove exactly once, and the delete a replay makes. Mixed into
:class:`~eos_pipeline.adapters.clickhouse.sink.ClickHouseSink`."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.clickhouse.ddl import quote_identifier, table_ref
from eos_pipeline.adapters.clickhouse.errors import explained_errors
from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.proof import TableAggregate
from eos_pipeline.core.schema import SourceColumns


class SourceRangeQueries:
    """Per topic-partition reads and deletes; needs ``_client`` and ``target`` from its class."""

    _client: Client
    target: str

    def _errors(
        self, action: str, database: str | None = None, table: str | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Driver errors raised inside, re-raised as ClickHouseSinkError naming this target."""
        return explained_errors(action, self.target, database, table)

    def _select(
        self,
        action: str,
        columns: str,
        where_table: tuple[str, str, str, int],
        within: OffsetRange | None,
        source: SourceColumns | None,
        tail: str = "",
    ) -> Sequence[Sequence[Any]]:
        """``SELECT columns ... WHERE <topic-partition in range> tail``; ``{offset}`` in
        ``columns`` and ``tail`` names the table's offset column."""
        database, table, topic, partition = where_table
        src = source or SourceColumns()
        offset = quote_identifier(src.offset, "offset column")
        where, params = self._source_filter(src, topic, partition, within)
        sql = (
            f"SELECT {columns.format(offset=offset)} FROM {table_ref(database, table)} "
            f"WHERE {where}{tail.format(offset=offset)}"
        )
        with self._errors(action, database, table):
            return self._client.query(sql, parameters=params).result_rows

    def offsets_in_table(
        self,
        database: str,
        table: str,
        topic: str,
        partition: int,
        *,
        within: OffsetRange | None = None,
        source: SourceColumns | None = None,
    ) -> list[tuple[int, int]]:
        """``(offset, rows)`` per source offset of one topic-partition, in offset order.

        Exactly-once holds when every offset read from Kafka appears once with ``rows`` equal to
        the records it produced; a duplicate shows up as a larger count.
        """
        rows = self._select(
            "reading offsets",
            "{offset}, count()",
            (database, table, topic, partition),
            within,
            source,
            " GROUP BY {offset} ORDER BY {offset}",
        )
        return [(int(o), int(n)) for o, n in rows]

    def offset_aggregate(
        self,
        database: str,
        table: str,
        topic: str,
        partition: int,
        *,
        within: OffsetRange,
        source: SourceColumns | None = None,
    ) -> TableAggregate:
        """Rows, distinct offsets and their sum in ``within``, summed up by ClickHouse itself:
        the incremental exactly-once check re-checks a proven range without reading its rows."""
        ((rows, distinct, total),) = self._select(
            "summing offsets",
            "count(), uniqExact({offset}), sum(toInt128({offset}))",
            (database, table, topic, partition),
            within,
            source,
        )
        return TableAggregate(int(rows), int(distinct), int(total))

    def lowest_offset(
        self,
        database: str,
        table: str,
        topic: str,
        partition: int,
        *,
        below: int,
        source: SourceColumns | None = None,
    ) -> int | None:
        """The smallest source offset of the topic-partition below ``below``, or None."""
        ((rows, low),) = self._select(
            "reading the lowest offset",
            "count(), min({offset})",
            (database, table, topic, partition),
            OffsetRange(0, below),
            source,
        )
        return int(low) if rows else None

    def delete_offsets(
        self,
        database: str,
        table: str,
        topic: str,
        partition: int,
        within: OffsetRange,
        *,
        source: SourceColumns | None = None,
    ) -> int:
        """Delete the rows of one topic-partition whose source offset is in ``within`` (a replay).

        A synchronous mutation (``mutations_sync = 2``: done on every replica before it returns),
        idempotent: deleting again deletes nothing. Returns how many rows there were.
        """
        src = source or SourceColumns()
        where, params = self._source_filter(src, topic, partition, within)
        ref = table_ref(database, table)
        with self._errors("deleting a replayed range", database, table):
            rows = int(
                self._client.query(
                    f"SELECT count() FROM {ref} WHERE {where}", parameters=params
                ).result_rows[0][0]
            )
            if rows:
                self._client.command(
                    f"ALTER TABLE {ref} DELETE WHERE {where}",
                    parameters=params,
                    settings={"mutations_sync": 2},
                )
        return rows

    def count(
        self,
        database: str,
        table: str,
        topic: str | None = None,
        partition: int | None = None,
        *,
        source: SourceColumns | None = None,
    ) -> int:
        """Rows in the table, or in one topic / topic-partition of it."""
        src = source or SourceColumns()
        sql = f"SELECT count() FROM {table_ref(database, table)}"
        params: dict[str, Any] = {}
        if topic is not None:
            where, params = self._source_filter(src, topic, partition, None)
            sql += f" WHERE {where}"
        elif partition is not None:
            raise ValueError("count(): a partition needs its topic")
        with self._errors("counting rows", database, table):
            return int(self._client.query(sql, parameters=params).result_rows[0][0])

    @staticmethod
    def _source_filter(
        src: SourceColumns, topic: str, partition: int | None, within: OffsetRange | None
    ) -> tuple[str, dict[str, Any]]:
        clauses = [f"{quote_identifier(src.topic, 'topic column')} = {{topic:String}}"]
        params: dict[str, Any] = {"topic": topic}
        if partition is not None:
            clauses.append(f"{quote_identifier(src.partition, 'partition column')} = {{p:Int64}}")
            params["p"] = partition
        if within is not None:
            offset = quote_identifier(src.offset, "offset column")
            clauses.append(f"{offset} >= {{start:Int64}} AND {offset} < {{end:Int64}}")
            params.update(start=within.start, end=within.end)
        return " AND ".join(clauses), params


__all__ = ["SourceRangeQueries"]
