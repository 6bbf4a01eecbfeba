"""The backlog benchmark through Dagster splits its time and finds the drain's end correctly.

Only the bookkeeping is tested here (the measurement itself starts ``dagster dev`` and takes
minutes: ``python -m benchmarks.dagster_throughput``).
"""

from __future__ import annotations

from benchmarks.dagster_throughput import MOMENTS, first_moves, importtime_top, split
from benchmarks.proc_cpu import TreeCpu, role_of


def test_split_goes_from_each_known_moment_to_the_next_and_adds_up() -> None:
    moments = {m: 100.0 + 2.0 * i for i, m in enumerate(MOMENTS)}
    moments["run_enqueued"] = None  # an event the run's log did not have
    moments["run_launched"] = 107.5

    parts = split(moments)

    assert "run_requested_to_run_enqueued" not in parts
    assert parts["run_requested_to_run_launched"] == 107.5 - moments["run_requested"]
    assert parts["run_launched_to_run_process_started"] == moments["run_process_started"] - 107.5
    total = moments["all_committed"] - moments["dagster_dev_started"]
    assert round(sum(parts.values()), 6) == total


def test_split_of_nothing_known_is_empty() -> None:
    assert split(dict.fromkeys(MOMENTS)) == {}


def test_first_moves_is_first_commit_and_when_the_last_partition_reached_its_end() -> None:
    moves = {
        0: [(10.0, 500), (12.0, 1000)],
        1: [(11.0, 400), (15.0, 900), (16.0, 1000)],  # reached its end 900 at 15.0
    }

    assert first_moves(moves, {0: 1000, 1: 900}) == (10.0, 15.0)
    # a partition still short of its end: not all committed
    assert first_moves(moves, {0: 1000, 1: 1001}) == (10.0, None)
    assert first_moves({}, {0: 1}) == (None, None)


def test_tree_cpu_counts_each_role_inside_the_window_only() -> None:
    cpu = TreeCpu(root=1)
    cpu.roles = {
        10: role_of("python -m dagster api execute_run {}"),
        11: role_of("dagster-daemon run"),
    }
    cpu.samples = [
        (100.0, {10: 1.0, 11: 5.0}),
        (101.0, {10: 3.0, 11: 5.5}),
        (102.0, {10: 4.0, 11: 6.5, 12: 0.5}),  # 12 started inside the window (role unknown)
        (103.0, {11: 9.0}),  # 10 ended: its last value stands
    ]

    assert cpu.by_role(100.5, 102.5) == {"daemon": 1.5, "other": 0.5, "run worker": 3.0}
    assert cpu.by_role(99.0, 103.0) == {"daemon": 9.0, "other": 0.5, "run worker": 4.0}


def test_importtime_top_sums_self_times_per_package_costliest_first() -> None:
    stderr = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       900 |        900 |     kazoo.retry",
            "import time:       100 |       1000 |   kazoo.client",
            "import time:      3000 |       3000 | dagster._core.definitions",
            "import time:       500 |       4500 | eos_pipeline.definitions",
            "a line that is not importtime's",
        ]
    )

    assert importtime_top(stderr) == {"dagster": 3.0, "kazoo": 1.0, "eos_pipeline": 0.5}
    assert list(importtime_top(stderr, top=1)) == ["dagster"]
