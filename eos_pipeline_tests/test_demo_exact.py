"""The demo's exactness verdict (``eos_dev.demo_exact``) on read-back data, without a stack:
it must pass an exact topic and name each way a topic can fail to be exact."""

from __future__ import annotations

from typing import Any

from eos_dev.demo_exact import judge

TOPIC = "demo-avro"


def letter(partition: int, offset: int, error_class: str, pipeline: str = "p") -> Any:
    return (
        0,
        offset,
        {
            "eos.pipeline": pipeline,
            "eos.source.topic": TOPIC,
            "eos.source.partition": str(partition),
            "eos.source.offset": str(offset),
            "eos.error.class": error_class,
        },
    )


def counts(ch: dict[int, list[int]], hudi: dict[int, list[int]]) -> dict[str, Any]:
    return {
        "clickhouse": {p: [len(o), len(set(o))] for p, o in ch.items()},
        "hudi": {p: [len(o), len(set(o))] for p, o in hudi.items()},
        "clickhouse_offsets": {p: sorted(set(o)) for p, o in ch.items()},
        "hudi_offsets": {p: sorted(set(o)) for p, o in hudi.items()},
    }


def test_rows_and_dead_letters_that_cover_every_offset_once_are_exact() -> None:
    # offset 1 of partition 0 is dead, written by both sinks with the same class
    letters = [letter(0, 1, "BadFraming"), letter(0, 1, "BadFraming"), letter(1, 0, "Unknown")]
    got = judge("p", TOPIC, {0: 3, 1: 2}, counts({0: [0, 2], 1: [1]}, {0: [0, 2], 1: [1]}), letters)
    assert got.exact, got.problems
    assert got.rows == {0: (3, 2, 2, 2, 2, 1), 1: (2, 1, 1, 1, 1, 1)}
    assert got.classes == {"BadFraming": 1, "Unknown": 1}


def test_each_kind_of_inexactness_is_named() -> None:
    ends = {0: 3}
    # a duplicate row in ClickHouse
    dup = judge("p", TOPIC, ends, counts({0: [0, 1, 2, 2]}, {0: [0, 1, 2]}), [])
    assert any("duplicate" in p for p in dup.problems)
    # the tables differ (Hudi lacks offset 2)
    differ = judge("p", TOPIC, ends, counts({0: [0, 1, 2]}, {0: [0, 1]}), [])
    assert any("tables differ" in p for p in differ.problems)
    # a dead letter that is also a row
    both = judge("p", TOPIC, ends, counts({0: [0, 1, 2]}, {0: [0, 1, 2]}), [letter(0, 2, "X")])
    assert any("rows and dead" in p for p in both.problems)
    # a record neither a row nor dead
    lost = judge("p", TOPIC, ends, counts({0: [0, 1]}, {0: [0, 1]}), [])
    assert any("end offset 3" in p for p in lost.problems)
    # the sinks gave one record two classes
    split = [letter(0, 2, "BadFraming"), letter(0, 2, "DecodeError")]
    classes = judge("p", TOPIC, ends, counts({0: [0, 1]}, {0: [0, 1]}), split)
    assert any("['BadFraming', 'DecodeError']" in p for p in classes.problems)
    # another pipeline's letters on the same topic do not count
    other = judge("p", TOPIC, ends, counts({0: [0, 1]}, {0: [0, 1]}), [letter(0, 2, "X", "q")])
    assert not other.exact and not other.classes
