"""The demo's last word on each topic: is every record once in both tables or a dead letter?

Pure: it judges what the demo read back (the tables' offsets per partition, counted in a child
process, and the dead-letter topic's headers), so a unit test can feed it any disagreement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.replay import dead_offsets


@dataclass
class Exactness:
    """What one pipeline's topic came to, partition by partition."""

    topic: str
    #: Per partition: Kafka's end, rows and distinct offsets in each table, dead letters.
    rows: dict[int, tuple[int, int, int, int, int, int]] = field(default_factory=dict)
    #: Dead letters per error class (one per source record, whichever sink wrote it).
    classes: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.problems


def judge(
    pipeline: str,
    topic: str,
    ends: Mapping[int, int],
    counts: Mapping[str, Mapping[int, list[int]]],
    letters: Iterable[tuple[int, int, Mapping[str, str]]],
) -> Exactness:
    """Per partition: each table holds every offset at most once, both tables hold the same
    offsets, none of them a dead letter, and rows plus dead letters reach Kafka's end offset;
    the two sinks gave each dead record the same error class.

    ``counts`` is :func:`eos_dev.demo.count_tables`'s answer with offsets (``clickhouse``,
    ``hudi``: ``[rows, distinct]``; ``clickhouse_offsets``, ``hudi_offsets``: the offsets);
    ``letters`` the dead-letter topic's log (``(partition, offset, headers)``).
    """
    letters = list(letters)
    out = Exactness(topic)
    dead = dead_offsets(letters, pipeline, None)
    said: dict[tuple[int, int], set[str]] = {}
    for _, _, h in letters:
        if h.get("eos.pipeline") == pipeline and h.get("eos.source.topic") == topic:
            where = (int(h["eos.source.partition"]), int(h["eos.source.offset"]))
            if "eos.error.class" in h:
                said.setdefault(where, set()).add(h["eos.error.class"])
    for where, classes in sorted(said.items()):
        if len(classes) > 1:
            out.problems.append(f"partition {where[0]} offset {where[1]}: {sorted(classes)}")
        out.classes[min(classes)] += 1
    for p, end in sorted(ends.items()):
        ch_rows, ch_distinct = counts["clickhouse"].get(p, [0, 0])
        hu_rows, hu_distinct = counts["hudi"].get(p, [0, 0])
        ch = set(counts["clickhouse_offsets"].get(p, []))
        hu = set(counts["hudi_offsets"].get(p, []))
        dlq = dead.get(TopicPartition(topic, p), set())
        out.rows[p] = (end, ch_rows, ch_distinct, hu_rows, hu_distinct, len(dlq))
        if ch_rows != ch_distinct or hu_rows != hu_distinct:
            out.problems.append(f"partition {p}: a duplicate row (rows above distinct offsets)")
        if ch != hu:
            out.problems.append(
                f"partition {p}: the tables differ ({len(ch - hu)} offsets only in ClickHouse, "
                f"{len(hu - ch)} only in Hudi)"
            )
        if ch & dlq or hu & dlq:
            out.problems.append(f"partition {p}: {len((ch | hu) & dlq)} offsets are rows and dead")
        if len(ch) + len(dlq) != end or len(hu) + len(dlq) != end:
            out.problems.append(
                f"partition {p}: end offset {end}, but ClickHouse {len(ch)} + dead {len(dlq)} "
                f"and Hudi {len(hu)} + dead {len(dlq)}"
            )
    return out
