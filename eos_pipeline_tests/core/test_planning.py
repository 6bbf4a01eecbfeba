"""The sensors' run planner, every branch, on plain data (no stack, no Dagster)."""

from __future__ import annotations

import hashlib

import pytest

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import (
    ANY_PARTITION,
    CHDB_PATH_TAG,
    FOLLOW_TAG,
    HUDI_TABLE_TAG,
    MAX_RUNS_PER_TICK,
    PARTITION_TAG,
    PRIORITY_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    SINK_PARTITION_TAG,
    SINK_TAG,
    START_STATE_TAG,
    Failures,
    NewPartitions,
    Plan,
    RunInfo,
    TopicState,
    asked_ends,
    clickhouse_needs_log_starts,
    clickhouse_range_run,
    failures_by_start,
    hudi_blocked,
    hudi_needs_log_starts,
    in_flight_keys,
    keys_for,
    parse_partition_key,
    partition_key,
    plan_clickhouse,
    plan_hudi,
    plan_new_partitions,
    recovery_order,
    stray_keys,
)
from eos_pipeline.core.planning import (
    ENDS_TAG as ENDS,
)
from eos_pipeline.core.retries import given_up_message

SINK = "p.clickhouse"
T = "events"
K0, K1, K2 = "events__p0000", "events__p0001", "events__p0002"
ALL = {K0, K1, K2}
CAUGHT_UP = "every partition is caught up (or has a run in flight)"


def after(start: int, end: int) -> SinkState:
    return SinkState(OffsetRange(start, end), Phase.AFTER)


def before(start: int, end: int) -> SinkState:
    return SinkState(OffsetRange(start, end), Phase.BEFORE)


def ch(
    *topics: TopicState,
    known: set[str] = ALL,
    busy: set[str] | None = None,
    failures: dict[tuple[str, str], Failures] | None = None,
    attempts: int = 3,
    reset: str = "earliest",
    **kw: object,
) -> Plan:
    return plan_clickhouse(
        SINK,
        topics,
        known=known,
        busy=busy or set(),
        failures=failures or {},
        max_attempts=attempts,
        reset=reset,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


# ------------------------------------------------------------------------------- runs


def test_in_flight_keys_single_partition_runs_and_range_runs() -> None:
    runs = [
        RunInfo("a", {PARTITION_TAG: K0}),
        RunInfo("b", {RANGE_START_TAG: K0, RANGE_END_TAG: K2}),
        RunInfo("c", {SINK_TAG: SINK}),  # neither: not counted
    ]
    assert in_flight_keys(runs) == {K0, ANY_PARTITION}
    assert in_flight_keys([]) == set()


def test_failures_are_counted_per_partition_and_start_state_newest_first() -> None:
    runs = [
        RunInfo("r3", {PARTITION_TAG: K0, START_STATE_TAG: "new:0"}),
        RunInfo("r2", {PARTITION_TAG: K0, START_STATE_TAG: "new:0"}),
        RunInfo("r1", {PARTITION_TAG: K0, START_STATE_TAG: "AFTER:4"}),
        RunInfo("hand", {PARTITION_TAG: K0}),  # launched by hand: not counted
        RunInfo("range", {START_STATE_TAG: "checkpoint:abc"}),
    ]
    assert failures_by_start(runs) == {
        (K0, "new:0"): Failures(2, "r3"),
        (K0, "AFTER:4"): Failures(1, "r1"),
        (ANY_PARTITION, "checkpoint:abc"): Failures(1, "range"),
    }


# ------------------------------------------------------------------------------- ClickHouse


def test_clickhouse_lagging_partition_gets_one_run() -> None:
    plan = ch(TopicState(T, {0: 8, 1: 5}, {0: after(0, 5), 1: after(0, 5)}))
    (run,) = plan.runs
    assert run.partition_key == K0
    assert run.run_key == f"{SINK}:{K0}:AFTER:5:8"
    assert run.tags == {
        SINK_TAG: SINK,
        SINK_PARTITION_TAG: f"{SINK}.{K0}",
        PRIORITY_TAG: "0",
        START_STATE_TAG: "AFTER:5",
    }
    assert plan.skip_reason is None and plan.given_up == ()


def test_clickhouse_same_state_same_keys() -> None:
    state = TopicState(T, {0: 8}, {0: after(0, 5)})
    assert ch(state).runs == ch(state).runs


def test_clickhouse_caught_up_asks_for_nothing() -> None:
    plan = ch(TopicState(T, {0: 5, 1: 0}, {0: after(0, 5)}, log_starts={1: 0}))
    assert plan == Plan(skip_reason=CAUGHT_UP)


def test_clickhouse_before_first_with_higher_priority() -> None:
    # partition 1 died mid-step on [5, 7): requested first, even with nothing past 7
    plan = ch(TopicState(T, {0: 3, 1: 7}, {0: after(0, 1), 1: before(5, 7)}))
    assert [r.partition_key for r in plan.runs] == [K1, K0]
    assert [r.tags[PRIORITY_TAG] for r in plan.runs] == ["10", "0"]
    assert plan.runs[0].tags[START_STATE_TAG] == "BEFORE:7"
    assert plan.runs[0].run_key == f"{SINK}:{K1}:BEFORE:7:7"


def test_clickhouse_in_flight_and_unknown_partitions_are_left_alone() -> None:
    state = TopicState(T, {0: 3, 1: 3, 2: 3}, {0: after(0, 0), 1: after(0, 0), 2: after(0, 0)})
    plan = ch(state, known={K0, K1}, busy={K0})
    assert [r.partition_key for r in plan.runs] == [K1]
    assert ch(state, known={K0}, busy={K0}) == Plan(skip_reason=CAUGHT_UP)


def test_clickhouse_new_partition_earliest_starts_at_the_log_start() -> None:
    state = TopicState(T, {0: 4, 1: 6}, {}, log_starts={0: 0, 1: 6})
    plan = ch(state)
    (run,) = plan.runs  # partition 1: log start == end, nothing to read
    assert run.partition_key == K0 and run.tags[START_STATE_TAG] == "new:0"
    assert run.run_key == f"{SINK}:{K0}:new:0:4"


def test_clickhouse_log_starts_only_asked_for_when_needed() -> None:
    new = TopicState(T, {0: 4, 1: 4}, {0: after(0, 4)})
    assert clickhouse_needs_log_starts(new, ALL, set(), "earliest")
    assert not clickhouse_needs_log_starts(new, ALL, set(), "latest")
    assert not clickhouse_needs_log_starts(new, ALL, {K1}, "earliest")  # in flight
    assert not clickhouse_needs_log_starts(new, {K0}, set(), "earliest")  # not known yet
    stored = TopicState(T, {0: 4}, {0: after(0, 4)})
    assert not clickhouse_needs_log_starts(stored, ALL, set(), "earliest")


def test_clickhouse_new_partition_latest_pins_its_start() -> None:
    plan = ch(TopicState(T, {0: 4}, {}), reset="latest")
    (run,) = plan.runs  # nothing to read, yet a first run pins the start at 4
    assert run.tags[START_STATE_TAG] == "new:4"


def test_clickhouse_latest_record_without_state_is_left_alone() -> None:
    # taken by a run that pins the start with its first write
    plan = ch(TopicState(T, {0: 4}, {0: None}), reset="latest")
    assert plan == Plan(skip_reason=CAUGHT_UP)
    # with earliest, the same record starts from the log start
    plan = ch(TopicState(T, {0: 4}, {0: None}, log_starts={0: 1}))
    assert plan.runs[0].tags[START_STATE_TAG] == "new:1"


def test_clickhouse_retry_gets_a_fresh_key_per_failure() -> None:
    state = TopicState(T, {0: 4}, {}, log_starts={0: 0})
    first = ch(state).runs[0]
    (second,) = ch(state, failures={(K0, "new:0"): Failures(1, "r1")}).runs
    assert second.run_key == first.run_key + ":retry1"
    assert second.tags == first.tags
    # failures from another state (or partition) do not count
    other = {(K0, "AFTER:2"): Failures(5, "x"), (K1, "new:0"): Failures(5, "y")}
    assert ch(state, failures=other).runs == (first,)


def test_clickhouse_gives_up_after_max_attempts() -> None:
    state = TopicState(T, {0: 4}, {}, log_starts={0: 0})
    plan = ch(state, failures={(K0, "new:0"): Failures(2, "r2")}, attempts=2)
    assert plan.runs == ()
    (message,) = plan.given_up
    assert message == given_up_message(f"{K0} ({SINK})", "new:0", Failures(2, "r2"), 2)
    assert K0 in message and "new:0" in message and "2 runs" in message and "r2" in message
    assert plan.skip_reason == message


def test_clickhouse_given_up_partitions_do_not_stop_the_others() -> None:
    state = TopicState(T, {0: 4, 1: 4}, {1: after(0, 2)}, log_starts={0: 0})
    plan = ch(state, failures={(K0, "new:0"): Failures(3, "r")})
    assert [r.partition_key for r in plan.runs] == [K1]
    assert len(plan.given_up) == 1 and plan.skip_reason is None


def test_clickhouse_at_most_max_runs_recovery_first() -> None:
    state = TopicState(T, {0: 4, 1: 4, 2: 4}, {0: after(0, 1), 1: after(0, 1), 2: before(1, 2)})
    plan = ch(state, max_runs=2)
    assert [r.partition_key for r in plan.runs] == [K2, K0]
    assert MAX_RUNS_PER_TICK == 200


def test_clickhouse_chdb_path_tag_and_several_topics() -> None:
    other = TopicState("other", {0: 2}, {0: after(0, 0)})
    plan = ch(
        TopicState(T, {0: 2}, {0: after(0, 0)}),
        TopicState("missing-from-known", {0: 2}, {}),
        other,
        known=ALL | {"other__p0000"},
        chdb_path="/data/chdb",
    )
    assert [r.partition_key for r in plan.runs] == [K0, "other__p0000"]
    assert all(r.tags[CHDB_PATH_TAG] == "/data/chdb" for r in plan.runs)
    assert CHDB_PATH_TAG not in ch(TopicState(T, {0: 2}, {0: after(0, 0)})).runs[0].tags


# ------------------------------------------------------------------------------- ClickHouse on chDB

CHDB = "/data/chdb"
K3 = "events__p0003"
ORDER = [K0, K1, K2, K3]


def chdb(*topics: TopicState, ordered: list[str] = ORDER, **kw: object) -> Plan:
    return ch(*topics, known=set(ordered), chdb_path=CHDB, ordered_keys=ordered, **kw)


def _range(run) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    return run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]


def test_chdb_one_range_run_for_every_lagging_partition() -> None:
    state = TopicState(T, {0: 8, 1: 5, 2: 9, 3: 3}, {p: after(0, 3) for p in range(4)})
    (run,) = chdb(state).runs
    assert run.partition_key is None  # a key-range run, not one partition
    assert _range(run) == (K0, K2)  # partition 3 is caught up and outside the range
    assert run.tags[SINK_TAG] == SINK and run.tags[CHDB_PATH_TAG] == CHDB
    assert run.tags[PRIORITY_TAG] == "0"
    assert run.tags[START_STATE_TAG].startswith("range:")
    assert SINK_PARTITION_TAG not in run.tags and PARTITION_TAG not in run.tags
    # nothing new: the same key, so Dagster launches it once
    assert chdb(state).runs == (run,)
    # more records in a partition of the range: a new key, same start state
    (more,) = chdb(TopicState(T, {0: 9, 1: 5, 2: 9, 3: 3}, state.records)).runs
    assert more.run_key != run.run_key
    assert more.tags[START_STATE_TAG] == run.tags[START_STATE_TAG]


def test_chdb_nothing_is_queued_behind_a_running_run_until_an_end_moves_past_its_ask() -> None:
    state = TopicState(T, {0: 8, 1: 5, 2: 9, 3: 3}, {p: after(0, 3) for p in range(4)})
    (run,) = chdb(state).runs
    running = asked_ends([RunInfo("r1", run.tags)])
    assert running == {K0: 8, K1: 5, K2: 9}  # what the run was asked for, per lagging partition
    # the same records: the running run reads them, a run behind it would find nothing
    idle = chdb(state, running_ends=running)
    assert not idle.runs and "is writing up to these ends" in idle.skip_reason

    def with_ends(ends: dict[int, int]) -> Plan:
        return chdb(TopicState(T, ends, state.records), running_ends=running)

    # one partition's end moved past the ask: the next run waits behind the running one
    (behind,) = with_ends({0: 8, 1: 6, 2: 9, 3: 3}).runs
    assert _range(behind) == (K0, K2)
    # a partition the running run was not asked for (3) starts lagging: also asked for
    (other,) = with_ends({0: 8, 1: 5, 2: 9, 3: 4}).runs
    assert _range(other) == (K0, K3)
    # runs launched by hand say nothing about ends: no rule applies
    assert asked_ends([RunInfo("by-hand", {SINK_TAG: SINK})]) is None
    # two running runs: the higher ask per partition counts
    two = [RunInfo("a", {ENDS: f"{K0}=3,{K1}=9"}), RunInfo("b", {ENDS: f"{K0}=7"})]
    assert asked_ends(two) == {K0: 7, K1: 9}


def test_chdb_gaps_of_caught_up_partitions_are_covered_not_split() -> None:
    # 0 and 3 lag, 1 and 2 are caught up: one range over all four (1 and 2 cost no insert)
    state = TopicState(T, {0: 8, 1: 3, 2: 3, 3: 9}, {p: after(0, 3) for p in range(4)})
    (run,) = chdb(state).runs
    assert _range(run) == (K0, K3)
    # the range follows the order partitions were added, not the key order
    (run,) = chdb(state, ordered=[K3, K1, K2, K0]).runs
    assert _range(run) == (K3, K0)


def test_chdb_before_partition_raises_the_priority_and_recovers_first() -> None:
    state = TopicState(T, {0: 8, 1: 7, 2: 3}, {0: after(0, 3), 1: before(5, 7), 2: after(0, 3)})
    (run,) = chdb(state).runs
    assert _range(run) == (K0, K1) and run.tags[PRIORITY_TAG] == "10"
    # inside the run: BEFORE first, then the rest in key order
    states = {K0: after(0, 3), K1: before(5, 7), K2: None, K3: before(0, 1)}
    assert recovery_order([K2, K0, K1, K3], states) == [K1, K3, K0, K2]
    assert recovery_order([K1, K0], {}) == [K0, K1]


def test_chdb_a_queued_run_waits_a_running_one_gets_the_next_behind_it() -> None:
    state = TopicState(T, {0: 8, 2: 5}, {0: after(0, 3), 2: after(0, 3)})
    queued = chdb(state, busy={ANY_PARTITION}, queued=True)
    assert queued == Plan(skip_reason=f"a run of {SINK} is queued: it reads what arrived meanwhile")
    # a range run is running: the next one is asked for, to wait behind it
    (run,) = chdb(state, busy={ANY_PARTITION}).runs
    assert _range(run) == (K0, K2)
    # a partition with its own run in flight (launched by hand) is left to it
    (run,) = chdb(state, busy={K0}).runs
    assert _range(run) == (K2, K2)
    assert chdb(TopicState(T, {0: 3}, {0: after(0, 3)})) == Plan(skip_reason=CAUGHT_UP)


def test_chdb_following_run_covers_every_partition_and_stops_further_requests() -> None:
    # only partition 1 lags, yet a following run covers all four: it writes whatever arrives
    state = TopicState(T, {0: 3, 1: 5, 2: 3, 3: 3}, {p: after(0, 3) for p in range(4)})
    (run,) = chdb(state, follow=True).runs
    assert _range(run) == (K0, K3) and run.tags[FOLLOW_TAG] == "true"
    (plain,) = chdb(state).runs
    assert _range(plain) == (K1, K1) and FOLLOW_TAG not in plain.tags
    # while it follows, nothing else is asked for (a run behind it would stop it)
    following = chdb(state, busy={ANY_PARTITION}, follow=True, following=True)
    assert following.runs == () and "follows the stream" in str(following.skip_reason)
    # nothing lags: no following run either
    idle = TopicState(T, {p: 3 for p in range(4)}, {p: after(0, 3) for p in range(4)})
    assert chdb(idle, follow=True) == Plan(skip_reason=CAUGHT_UP)


def test_server_runs_follow_their_own_partition() -> None:
    (run,) = ch(TopicState(T, {0: 8}, {0: after(0, 3)}), follow=True).runs
    assert run.partition_key == K0 and run.tags[FOLLOW_TAG] == "true"
    # a partition whose (following) run is in flight is left to it
    assert ch(TopicState(T, {0: 8}, {0: after(0, 3)}), busy={K0}, follow=True).runs == ()


def test_chdb_unknown_partitions_and_several_topics() -> None:
    other = "other__p0000"
    plan = chdb(
        TopicState(T, {0: 3, 1: 4}, {0: after(0, 3), 1: after(0, 0)}),
        TopicState("other", {0: 2}, {}, log_starts={0: 0}),
        ordered=[K0, K1, other],
    )
    assert _range(plan.runs[0]) == (K1, other)
    # a partition not known yet is not asked for
    assert chdb(TopicState(T, {5: 4}, {})) == Plan(skip_reason=CAUGHT_UP)


def test_chdb_range_retry_then_give_up() -> None:
    state = TopicState(T, {0: 8, 1: 5}, {0: after(0, 3), 1: after(0, 3)})
    (first,) = chdb(state).runs
    start = first.tags[START_STATE_TAG]
    (retry,) = chdb(state, failures={(ANY_PARTITION, start): Failures(1, "r1")}).runs
    assert retry.run_key == first.run_key + ":retry1"
    gave_up = chdb(state, failures={(ANY_PARTITION, start): Failures(3, "r3")})
    assert gave_up.runs == ()
    (message,) = gave_up.given_up
    assert gave_up.skip_reason == message and "r3" in message and f"{K0}=AFTER:3" in message
    # a failure of another state (the position moved) does not count
    moved = TopicState(T, {0: 8, 1: 5}, {0: after(3, 4), 1: after(0, 3)})
    assert chdb(moved, failures={(ANY_PARTITION, start): Failures(3, "r3")}).runs


def test_clickhouse_range_run_is_what_plan_clickhouse_asks_for_on_chdb() -> None:
    state = TopicState(T, {0: 8}, {0: after(0, 3)})
    direct = clickhouse_range_run(
        SINK,
        [state],
        ordered_keys=ORDER,
        busy=(),
        failures={},
        max_attempts=3,
        reset="earliest",
        chdb_path=CHDB,
    )
    assert chdb(state) == direct
    # on a server: one run per partition, side by side
    assert ch(state, ordered_keys=ORDER).runs[0].partition_key == K0


# ------------------------------------------------------------------------------- Hudi

HUDI = "p.hudi"
TABLE = "/tables/events"


def hudi(
    ends: dict[int, int],
    checkpoint: dict[int, int],
    *,
    ordered: list[str] | None = None,
    busy: set[str] | None = None,
    failures: dict[tuple[str, str], Failures] | None = None,
    attempts: int = 3,
    reset: str = "earliest",
    log_starts: dict[int, int] | None = None,
    follow: bool = False,
    following: bool = False,
) -> Plan:
    return plan_hudi(
        HUDI,
        TABLE,
        T,
        ends=ends,
        ordered_keys=ordered if ordered is not None else [K0, K1, K2],
        checkpoint={TopicPartition(T, p): o for p, o in checkpoint.items()},
        busy=busy or set(),
        failures=failures or {},
        max_attempts=attempts,
        reset=reset,  # type: ignore[arg-type]
        log_starts=log_starts,
        follow=follow,
        following=following,
    )


def _digest(state: str) -> str:
    return "checkpoint:" + hashlib.sha256(state.encode()).hexdigest()[:16]


def test_hudi_one_range_run_over_the_lagging_partitions() -> None:
    plan = hudi({0: 5, 1: 3, 2: 9}, {0: 2, 1: 3, 2: 4})
    (run,) = plan.runs
    assert run.partition_key is None
    assert run.tags == {
        SINK_TAG: HUDI,
        HUDI_TABLE_TAG: TABLE,
        RANGE_START_TAG: K0,
        RANGE_END_TAG: K2,  # the caught-up partition in between is an empty range
        START_STATE_TAG: _digest("0:2,1:3,2:4"),
    }
    assert run.run_key == f"{HUDI}:0:2,1:3,2:4:5,3,9"


def test_hudi_range_follows_the_order_partitions_were_added() -> None:
    (run,) = hudi({0: 5, 1: 5}, {0: 0, 1: 0}, ordered=[K1, K0]).runs
    assert (run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]) == (K1, K0)


def test_hudi_caught_up_and_unknown_partitions() -> None:
    assert hudi({0: 5, 1: 3}, {0: 5, 1: 3}) == Plan(skip_reason="the Hudi table is caught up")
    assert hudi({0: 5, 1: 9}, {0: 5, 1: 3}, ordered=[K0]).skip_reason  # 1 is not known yet


def test_hudi_run_in_flight_blocks_the_table() -> None:
    reason = f"a run writing {TABLE} is queued or running"
    assert hudi_blocked({ANY_PARTITION}, TABLE) == reason
    assert hudi_blocked(set(), TABLE) is None
    assert hudi({0: 5}, {0: 0}, busy={K0}) == Plan(skip_reason=reason)


def test_hudi_following_run_covers_every_partition_and_nothing_is_asked_behind_it() -> None:
    # one lagging partition: a following run covers all known ones (it commits what arrives
    # anywhere); the run key is the same as without following
    (run,) = hudi({0: 5, 1: 9, 2: 4}, {0: 5, 1: 3, 2: 4}, follow=True).runs
    assert (run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]) == (K0, K2)
    assert run.tags[FOLLOW_TAG] == "true"
    (plain,) = hudi({0: 5, 1: 9, 2: 4}, {0: 5, 1: 3, 2: 4}).runs
    assert (plain.tags[RANGE_START_TAG], plain.tags[RANGE_END_TAG]) == (K1, K1)
    assert FOLLOW_TAG not in plain.tags and plain.run_key == run.run_key
    # nothing lagging: nothing to follow yet
    assert not hudi({0: 5}, {0: 5}, follow=True).runs
    # while a following run writes the table, the skip reason says so
    reason = f"a following run is writing {TABLE}: it writes what arrives"
    assert hudi_blocked({ANY_PARTITION}, TABLE, following=True) == reason
    assert hudi({0: 9}, {0: 0}, busy={ANY_PARTITION}, follow=True, following=True) == Plan(
        skip_reason=reason
    )
    assert hudi_blocked(set(), TABLE, following=True) is None


def test_hudi_new_partitions_from_the_reset_policy() -> None:
    # earliest: from the log start; nothing to read when it equals the end
    (run,) = hudi({0: 5, 1: 3}, {}, log_starts={0: 0, 1: 3}).runs
    assert (run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]) == (K0, K0)
    assert run.run_key == f"{HUDI}:0:-,1:-:5,3"
    # latest: a first commit pins the start, so every new partition is asked for
    (run,) = hudi({0: 5, 1: 3}, {0: 5}, reset="latest").runs
    assert (run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]) == (K1, K1)


def test_hudi_log_starts_only_asked_for_when_needed() -> None:
    cp = {TopicPartition(T, 0): 5}
    assert hudi_needs_log_starts(T, {0: 5, 1: 3}, cp, ALL, "earliest")
    assert not hudi_needs_log_starts(T, {0: 5, 1: 3}, cp, ALL, "latest")
    assert not hudi_needs_log_starts(T, {0: 5, 1: 3}, cp, {K0}, "earliest")
    assert not hudi_needs_log_starts(T, {0: 5}, cp, ALL, "earliest")


def test_hudi_retry_then_give_up() -> None:
    start = _digest("0:1,1:-")
    first = hudi({0: 5, 1: 3}, {0: 1}, log_starts={1: 0}).runs[0]
    assert first.tags[START_STATE_TAG] == start
    (retry,) = hudi(
        {0: 5, 1: 3},
        {0: 1},
        log_starts={1: 0},
        failures={(ANY_PARTITION, start): Failures(2, "r2")},
    ).runs
    assert retry.run_key == first.run_key + ":retry2"
    gave_up = hudi(
        {0: 5, 1: 3},
        {0: 1},
        log_starts={1: 0},
        failures={(ANY_PARTITION, start): Failures(3, "r3")},
    )
    assert gave_up.runs == ()
    (message,) = gave_up.given_up
    assert gave_up.skip_reason == message
    assert TABLE in message and "checkpoint 0:1,1:-" in message and "3 runs" in message
    assert "r3" in message
    # the checkpoint moved: a new start state, asked for again
    (moved,) = hudi(
        {0: 5, 1: 3},
        {0: 2},
        log_starts={1: 0},
        failures={(ANY_PARTITION, start): Failures(3, "r3")},
    ).runs
    assert moved.tags[START_STATE_TAG] != start and not moved.run_key.endswith("retry3")


# ------------------------------------------------------------------------------- partitions


def test_new_partitions_in_order_and_none_new() -> None:
    assert plan_new_partitions({K0}, {T: 3, "b": 1}) == NewPartitions((K1, K2, "b__p0000"))
    none = plan_new_partitions(ALL, {T: 3})
    assert none == NewPartitions(skip_reason="3 partitions, none new")
    missing = plan_new_partitions(ALL, {T: 3}, ["gone"])
    assert missing.skip_reason == "3 partitions, none new; topics not found: ['gone']"


def test_partition_keys_round_trip_and_sort_in_partition_order() -> None:
    tp = TopicPartition("a__p0.b", 12)
    assert partition_key(tp) == "a__p0.b__p0012"
    assert parse_partition_key(partition_key(tp)) == tp
    assert keys_for(T, 11) == sorted(keys_for(T, 11))
    for bad in ("events", "__p0001", "events__pX"):
        with pytest.raises(ValueError, match="not of the form"):
            parse_partition_key(bad)


def test_keys_that_match_no_kafka_partition_are_removed_naming_the_valid_keys() -> None:
    typo = "demo-events-typo"
    existing = {K0, K1, K2, typo, f"{T}__p0003", f"{T}__p00001", "other__p0000"}
    plan = plan_new_partitions(existing, {T: 3})
    assert plan.keys == () and plan.skip_reason is None
    assert plan.remove == tuple(sorted([typo, f"{T}__p0003", f"{T}__p00001", "other__p0000"]))
    assert plan.remove_reason is not None
    assert typo in plan.remove_reason and f"Valid keys: {K0}, {K1}, {K2}" in plan.remove_reason
    # added and removed in one evaluation
    both = plan_new_partitions({K0, typo}, {T: 2})
    assert (both.keys, both.remove) == ((K1,), (typo,))


def test_keys_of_an_unreadable_topic_are_kept_and_many_valid_keys_are_summarised() -> None:
    kept = plan_new_partitions({K0, "gone__p0000"}, {T: 1}, ["gone"])
    assert kept.remove == () and kept.skip_reason is not None
    many = plan_new_partitions({"x"}, {T: 30})
    assert many.remove == ("x",)
    assert f"{T}__p0000 .. {T}__p0029 (30 keys)" in str(many.remove_reason)
    assert stray_keys({K0, K1}, {T: 2}) == []
