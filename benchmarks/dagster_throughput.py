"""``python -m benchmarks.dagster_throughput``: a backlog through the product's own Dagster
definitions against the direct path, same records, same run (issue 15).

Produces ``--records`` records of ``--record-bytes`` round robin over ``--partitions`` FIRST,
as fast as the producer goes; then, round by round with the order alternating (the machine is
shared and noisy):

* **direct**: the product's exactly-once ``ClickHousePartitionSync`` over every partition, as
  the harness and :mod:`benchmarks.kafka_engine_peer` run it, in a fresh process with a fresh
  chDB path; timed around the sync calls (wall and CPU of that process), and as a whole process;
* **through Dagster**: ``dagster dev`` on a pipelines file with the product's definitions (the
  partitions and lag sensors, the queued run coordinator and the default run launcher of the
  project's ``dagster.yaml``), a fresh chDB path and keeper root on the same topic, with runs
  that follow the stream (``clickhouse.follow``) and with runs that end once caught up. Timed
  from the start of ``dagster dev`` and from the first sensor tick (the sensors are on) until
  every offset is committed (the keeper's ``AFTER`` over each partition's end, watched as
  :mod:`benchmarks.latency_phase` does);
* **through Dagster, warm** (``--warm``): the steady state of a pipeline that is running. A
  following run is already up (the sensor launched it for a few warm-up records and it is
  waiting for more) when the backlog lands: the backlog is produced in ONE Kafka transaction on
  a topic of its own, and the clock starts when the commit is asked for (before it, read-committed
  readers see none of it). No run starts for it, so what is measured is the product's own run
  inside Dagster against the direct path, not the price of starting a run.

Every table is then counted in a child process: each offset once, or the benchmark fails. The
Dagster time is split along the first run that wrote: dagster dev start -> first sensor tick ->
run requested (created by the sensor daemon) -> enqueued -> launched (dequeued, handed to the run
launcher) -> run process started -> step started -> first batch committed -> last batch
committed (the drain); and the steps of that run (the asset, then the ``exactly_once`` check).
Writes ``benchmarks/results/dagster_throughput.json`` (not committed) with the ratios direct /
through Dagster by wall clock and the load averages, and what the run process pays before its
first step (:func:`run_entry_cost`: ``import dagster``, the code location's imports, building its
definitions, and the packages that cost most under ``python -X importtime``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.kafka_engine_peer import (
    PROJECT_CHILD,
    produce_backlog,
    run_child,
    send_round_robin,
)
from benchmarks.latency_phase import (
    KeeperWatch,
    _caught_up,
    _epoch,
    _in_flight,
    _wait,
    dagster_env,
    every_offset_once,
    keeper_store,
    pipelines_file,
)
from benchmarks.proc_cpu import TreeCpu
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic, end_offsets
from eos_pipeline.sinks.clickhouse import ClickHouseTableSpec

#: The direct path parses as the pipelines through Dagster do: with the product's default.
PRODUCT_JSON_PARSER = ClickHouseTableSpec.__dataclass_fields__["json_parser"].default

#: Moments of the Dagster path, in order; each part of the split is from one to the next.
MOMENTS = (
    "dagster_dev_started",
    "first_sensor_tick",
    "run_requested",
    "run_enqueued",
    "run_launched",
    "run_process_started",
    "step_started",
    "first_batch_committed",
    "all_committed",
)


def split(moments: Mapping[str, float | None]) -> dict[str, float | None]:
    """Seconds from each moment of :data:`MOMENTS` to the next one that is known."""
    known = [(m, moments[m]) for m in MOMENTS if moments.get(m) is not None]
    return {
        f"{a}_to_{b}": round(float(tb) - float(ta), 2)  # type: ignore[arg-type]
        for (a, ta), (b, tb) in itertools.pairwise(known)
    }


def first_moves(moves: Mapping[int, Sequence[tuple[float, int]]], ends: Mapping[int, int]) -> tuple:
    """When the first batch of any partition was committed, and when the last partition
    reached its end (None if one did not)."""
    firsts = [v[0][0] for v in moves.values() if v]
    done = [next((t for t, end in moves.get(p, []) if end >= e), None) for p, e in ends.items()]
    last = None if any(t is None for t in done) else max(done, default=None)  # type: ignore[type-var]
    return min(firsts, default=None), last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dagster_throughput", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-bytes", type=int, default=1600)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=25_000, help="max_records, both paths")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=int, default=2, help="sensor interval (s)")
    follow = "idle_seconds of the following runs (0: measure only runs ending caught up)"
    parser.add_argument("--follow", type=float, default=10.0, help=follow)
    parser.add_argument(
        "--no-ending", action="store_true", help="skip the runs that end once caught up"
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="also measure the backlog landing (one Kafka transaction) while a following run "
        "is already up",
    )
    parser.add_argument(
        "--warm-idle",
        type=float,
        default=120.0,
        help="idle_seconds of the warm mode's following run (it must outlast the produce)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="per Dagster round")
    parser.add_argument("--kafka-bootstrap", help="default: start a stack on free ports")
    parser.add_argument("--zookeeper-hosts")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/dagster_throughput.json")
    )
    args = parser.parse_args(argv)
    args.workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="eos-dagster-tp-"))).resolve()
    if args.kafka_bootstrap and args.zookeeper_hosts:
        doc = measure(args)
    else:
        from benchmarks.local_stack import private_stack

        with private_stack(args.workdir) as config:
            args.kafka_bootstrap, args.zookeeper_hosts = (
                config.kafka_bootstrap,
                config.zookeeper_hosts,
            )
            doc = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=2))
    return 0 if doc["exact"] else 1


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    kafka = KafkaSettings(args.kafka_bootstrap)
    topic = f"backlog-{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic, args.partitions)
    began = time.perf_counter()
    size = produce_backlog(kafka, topic, args.partitions, args.records, args.record_bytes)
    produced_s = time.perf_counter() - began
    ends = end_offsets(kafka, topic)
    if sum(ends.values()) != args.records:
        raise RuntimeError(f"produced {args.records} records, Kafka holds {sum(ends.values())}")
    _say(f"produced {args.records:,} records ({size / 1e6:.0f} MB) in {produced_s:.1f} s")
    modes = (
        ([f"following {args.follow:g}"] if args.follow > 0 else [])
        + ([] if args.no_ending else ["ending caught up"])
        + (["warm following"] if args.warm else [])
    )
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in ["direct", *modes]}
    for n in range(args.rounds):
        order = ["direct", *modes] if n % 2 == 0 else [*modes, "direct"]
        for mode in order:
            work = args.workdir / f"r{n}-{mode.split()[0]}"
            load = os.getloadavg()[0]
            if mode == "direct":
                result = direct(args, topic, ends, work)
            elif mode == "warm following":
                result = warm_dagster(args, work)
            else:
                follow = args.follow if mode.startswith("following") else 0.0
                result = through_dagster(args, topic, ends, follow, work)
            result["load_avg_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
            runs[mode].append(result)
            _say(f"[round {n}] {mode}: {json.dumps(_brief(result))}")
    summary = summarize(runs, size)
    dagster_work = [args.workdir / f"r0-{m.split()[0]}" for m in modes if m != "warm following"]
    entry = run_entry_cost(dagster_work[0]) if dagster_work else None
    return {
        "benchmark": "dagster_throughput",
        "command": " ".join(["python -m benchmarks.dagster_throughput", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "records": args.records,
        "megabytes": round(size / 1e6, 1),
        "partitions": args.partitions,
        "batch": args.batch,
        "sensor_interval_s": args.interval,
        "produce_seconds": round(produced_s, 2),
        "cpus": os.cpu_count(),
        "summary": summary,
        "run_entry": entry,
        "rounds": runs,
        "exact": all(r["exact"] for v in runs.values() for r in v),
    }


def _brief(result: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("seconds", "from_sensors_on_s", "from_dagster_start_s", "from_commit_s")
    keys += ("cpu_seconds", "runs_started_for_backlog", "exact")
    return {k: result[k] for k in keys if k in result}


def direct(args: argparse.Namespace, topic: str, ends: dict[int, int], work: Path) -> dict:
    """The exactly-once sync of every partition in a fresh process, timed inside it."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "chdb"
    child = [args.kafka_bootstrap, args.zookeeper_hosts, topic, str(args.partitions)]
    child += [str(path), str(args.batch), PRODUCT_JSON_PARSER]
    began = time.perf_counter()
    got = run_child(PROJECT_CHILD, child, args.records)
    whole = time.perf_counter() - began
    exact = every_offset_once(topic, ends, f"chdb://{path}", "bench", "events")
    return {
        "seconds": round(got["seconds"], 3),
        "cpu_seconds": round(got["cpu"], 3),
        "process_seconds": round(whole, 3),
        "exact": exact and got["rows"] == got["distinct"] == args.records,
    }


@contextlib.contextmanager
def dagster_up(
    args: argparse.Namespace, topic: str, follow: float, work: Path
) -> Iterator[tuple[Any, KeeperWatch, TreeCpu, Path, float]]:
    """``dagster dev`` on a fresh table of ``topic`` (pipelines file, instance, keeper watch and
    CPU sampler under ``work``); yields (instance, watch, cpu, log, when dagster dev was
    started) and stops all of it."""
    from eos_dev.demo import start_dagster, stop_dagster
    from eos_dev.stack.services import free_port

    work.mkdir(parents=True, exist_ok=True)
    config = work / "pipelines.yaml"
    kafka, zookeeper = args.kafka_bootstrap, args.zookeeper_hosts
    pipelines_file(config, kafka, zookeeper, topic, args.interval, follow=follow, batch=args.batch)
    env, instance = dagster_env(work, config, args.interval)
    store = keeper_store(config)
    watch = KeeperWatch(store, topic)
    watch.start()
    log = work / "dagster.log"
    began = time.time()
    process = start_dagster(env, free_port(), log)
    cpu = TreeCpu(process.pid)
    cpu.start()
    try:
        yield instance, watch, cpu, log, began
    finally:
        cpu.stop.set()
        cpu.join(5)
        watch.stop.set()
        stop_dagster(process)
        watch.join(5)
        store.close()
        instance.dispose()


def _table_url(work: Path) -> str:
    return json.loads((work / "pipelines.yaml").read_text())["clickhouse"]["url"]


def through_dagster(
    args: argparse.Namespace, topic: str, ends: dict[int, int], follow: float, work: Path
) -> dict[str, Any]:
    """``dagster dev`` on a fresh table of ``topic``; until every offset is committed."""
    with dagster_up(args, topic, follow, work) as (instance, watch, cpu, log, began):
        _wait(lambda: _caught_up(watch, None, ends), args, log)
        _wait(lambda: _in_flight(instance) == 0, args, log)
        runs = run_moments(instance)
        tick = first_tick(instance)
    first_batch, visible = first_moves(watch.moves, ends)
    first = min(runs, key=lambda r: r["run_requested"]) if runs else {}
    moments = {
        **{k: v for k, v in first.items() if k in MOMENTS},
        "dagster_dev_started": began,
        "first_sensor_tick": tick,
        "first_batch_committed": first_batch,
        "all_committed": visible,
    }
    assert visible is not None  # _wait returned
    return {
        "follow_idle_s": follow,
        "from_dagster_start_s": round(visible - began, 3),
        "from_sensors_on_s": round(visible - tick, 3) if tick else None,
        "from_run_process_start_s": round(visible - first["run_process_started"], 3)
        if first
        else None,
        "split_s": split(moments),
        # CPU of the dagster dev tree by role: starting up, then while the first run wrote
        "cpu_s_until_run_process_started": cpu.by_role(began, first["run_process_started"])
        if first
        else None,
        "cpu_s_run_process_started_to_all_committed": cpu.by_role(
            first["run_process_started"], visible
        )
        if first
        else None,
        "first_run_steps_s": first.get("steps_s", {}),
        "runs": len(runs),
        "run_statuses": sorted(r["status"] for r in runs),
        "run_ended_after_all_committed_s": round(max(r["run_ended"] for r in runs) - visible, 2)
        if runs
        else None,
        "exact": every_offset_once(topic, ends, _table_url(work), "latency", "events"),
    }


def warm_dagster(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The backlog lands, in one transaction, while a following run is already up."""
    kafka = KafkaSettings(args.kafka_bootstrap)
    topic = f"warm-{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic, args.partitions)
    with dagster_up(args, topic, args.warm_idle, work) as (instance, watch, cpu, log, _):
        producer = transactional_producer(kafka)
        warm_up = _produce_in_transaction(producer, topic, args.partitions, args.partitions, 50)
        warm_ends = _committed_ends(kafka, topic, dict.fromkeys(range(args.partitions), 1), args)
        _wait(lambda: _caught_up(watch, None, warm_ends), args, log)
        _wait(lambda: _in_flight(instance) > 0, args, log)  # the following run is up
        runs_before = len(run_moments(instance, finished_only=False))
        began = time.time()
        size = _produce_in_transaction(
            producer, topic, args.partitions, args.records, args.record_bytes, commit=False
        )
        produced = time.time()
        if _in_flight(instance) == 0:
            raise RuntimeError(
                f"the following run ended while the backlog was produced ({produced - began:.1f} "
                "s): raise --warm-idle"
            )
        committing = time.time()
        producer.commit_transaction(60)
        committed = time.time()
        share = [
            args.records // args.partitions + (p < args.records % args.partitions)
            for p in range(args.partitions)
        ]
        ends = _committed_ends(
            kafka, topic, {p: warm_ends[p] + n for p, n in enumerate(share)}, args
        )
        _wait(lambda: _caught_up(watch, None, ends), args, log)
        visible = max(t for moves in watch.moves.values() for t, _ in moves)
        runs_after = len(run_moments(instance, finished_only=False))
        cpu_s = cpu.by_role(committing, visible)
    return {
        "follow_idle_s": args.warm_idle,
        "warm_up_bytes": warm_up,
        "backlog_megabytes": round(size / 1e6, 1),
        "produce_s": round(produced - began, 3),
        "commit_call_s": round(committed - committing, 3),
        "from_commit_s": round(visible - committing, 3),
        "cpu_s_commit_to_all_committed": cpu_s,
        "runs_started_for_backlog": runs_after - runs_before,
        # two transactions: one record and one commit marker per partition, then the backlog
        "exact": every_offset_once(
            topic,
            ends,
            _table_url(work),
            "latency",
            "events",
            records={p: 1 + n for p, n in enumerate(share)},
        ),
    }


def _committed_ends(
    kafka: KafkaSettings, topic: str, at_least: dict[int, int], args: argparse.Namespace
) -> dict[int, int]:
    """Kafka's ends once every partition's passed ``at_least``: a transaction's commit markers
    are written after the commit call returns, so the last stable offset moves a moment later."""
    deadline = time.monotonic() + args.timeout
    while True:
        ends = end_offsets(kafka, topic)
        if all(ends.get(p, 0) > n for p, n in at_least.items()):
            return ends
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: ends {ends} did not pass {at_least}")
        time.sleep(0.05)


def transactional_producer(kafka: KafkaSettings) -> Any:
    """A transactional producer (the backlog becomes readable to read-committed readers, as
    the product's are, all at once when its transaction commits)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": 600_000,
            "linger.ms": 20,
            "batch.size": 1_000_000,
        }
    )
    producer.init_transactions(30)
    return producer


def _produce_in_transaction(
    producer: Any, topic: str, partitions: int, count: int, record_bytes: int, commit: bool = True
) -> int:
    """``count`` benchmark records round robin in one transaction (flushed; committed only if
    ``commit``); returns their bytes."""
    producer.begin_transaction()
    size = send_round_robin(producer, topic, partitions, count, record_bytes)
    if producer.flush(120) != 0:
        raise RuntimeError("the backlog was not sent within 120 s")
    if commit:
        producer.commit_transaction(60)
    return size


#: What a run process does before its first step, in the order it does it (Dagster's code server
#: starts it with multiprocessing's spawn: a fresh interpreter that unpickles the run's job,
#: which imports dagster, then loads the code location).
_RUN_ENTRY = """
import json, time
w, c = time.perf_counter(), time.process_time()
marks = {}
def mark(name):
    marks[name] = [round(time.perf_counter() - w, 3), round(time.process_time() - c, 3)]
import dagster
mark("import_dagster")
import eos_pipeline.components.project as project
mark("import_code_location")
project.load_project().definitions()
mark("definitions_built")
print(json.dumps(marks))
"""


def importtime_top(stderr: str, top: int = 10) -> dict[str, float]:
    """``python -X importtime``'s self times summed per top-level package (ms), the costliest
    ``top`` of them."""
    per: dict[str, float] = {}
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if m:
            root = m[2].split(".")[0]
            per[root] = per.get(root, 0.0) + int(m[1]) / 1000
    ranked = sorted(per.items(), key=lambda kv: -kv[1])[:top]
    return {k: round(v, 1) for k, v in ranked}


def run_entry_cost(work: Path, repeats: int = 3) -> dict[str, Any]:
    """What a run process pays before its first step, measured in fresh interpreters with the
    round's code location (``work``'s defs folder and Dagster home): seconds (wall, CPU) from
    interpreter start to ``import dagster``, to the code location imported, to its definitions
    built; the median of ``repeats``, and one ``-X importtime`` split per package."""
    env = {
        **os.environ,
        "DAGSTER_HOME": str(work / "dagster_home"),
        "EOS_DEFS_DIR": str(work / "defs"),
    }
    python = [sys.executable, "-c", _RUN_ENTRY]
    samples = []
    for _ in range(repeats):
        began = time.perf_counter()
        done = subprocess.run(python, env=env, capture_output=True, text=True, check=True)
        marks = json.loads(done.stdout.strip().splitlines()[-1])
        marks["process"] = [round(time.perf_counter() - began, 3), None]
        samples.append(marks)
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _RUN_ENTRY],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    median = {
        k: [round(statistics.median(s[k][0] for s in samples), 3)]
        + ([round(statistics.median(s[k][1] for s in samples), 3)] if samples[0][k][1] else [])
        for k in samples[0]
    }
    return {
        "wall_cpu_s_median": median,
        "importtime_self_ms_top": importtime_top(timed.stderr),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def run_moments(instance: Any, finished_only: bool = True) -> list[dict[str, Any]]:
    """Per run: requested, enqueued, launched, process started, first step started, ended
    (epoch s), and each step's start and end."""
    from dagster import DagsterEventType as E

    wanted = {E.RUN_ENQUEUED, E.RUN_STARTING, E.STEP_START, E.STEP_SUCCESS, E.STEP_FAILURE}
    out = []
    for rec in instance.get_run_records(limit=1000):
        if not finished_only:
            out.append({"run_id": rec.dagster_run.run_id})
            continue
        if rec.start_time is None or rec.end_time is None:
            continue
        events = instance.all_logs(rec.dagster_run.run_id, of_type=wanted)
        created = _epoch(rec.create_timestamp)
        first = {e.dagster_event_type: e.timestamp for e in reversed(events)}
        steps: dict[str, list[float]] = {}
        for e in events:
            steps.setdefault(e.step_key or "", []).append(e.timestamp)
        out.append(
            {
                "run_requested": created,
                "run_enqueued": first.get(E.RUN_ENQUEUED),
                "run_launched": first.get(E.RUN_STARTING),
                "run_process_started": rec.start_time,
                "step_started": first.get(E.STEP_START),
                "run_ended": rec.end_time,
                "status": rec.dagster_run.status.value,
                "steps_s": {
                    k: round(max(v) - min(v), 2) for k, v in steps.items() if k and len(v) > 1
                },
            }
        )
    return out


def first_tick(instance: Any) -> float | None:
    """When the daemon first evaluated any sensor of the instance (the sensors are on)."""
    from dagster._core.scheduler.instigation import InstigatorType

    stamps = []
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id)
        stamps += [t.timestamp for t in ticks]
    return min(stamps, default=None)


def summarize(runs: Mapping[str, list[dict[str, Any]]], size: int) -> dict[str, Any]:
    """Best and median of each mode, and direct / through Dagster by wall clock."""
    mb = size / 1e6
    direct_runs = runs["direct"]
    best_direct = min(r["seconds"] for r in direct_runs)
    med_direct = statistics.median(r["seconds"] for r in direct_runs)
    out: dict[str, Any] = {
        "direct": {
            "best_s": best_direct,
            "median_s": round(med_direct, 3),
            "mb_per_s_best": round(mb / best_direct, 1),
            "mb_per_cpu_s_best": round(mb / min(r["cpu_seconds"] for r in direct_runs), 1),
            "process_best_s": min(r["process_seconds"] for r in direct_runs),
        },
        "load_avg_1m": [x for v in runs.values() for r in v for x in r["load_avg_1m"]],
    }
    for mode, results in runs.items():
        if mode == "direct":
            continue
        entry: dict[str, Any] = {}
        for key in (
            "from_sensors_on_s",
            "from_dagster_start_s",
            "from_run_process_start_s",
            "from_commit_s",
        ):
            values = [r[key] for r in results if r.get(key) is not None]
            if not values:
                continue
            best, med = min(values), statistics.median(values)
            stem = key.removesuffix("_s")
            entry[f"{stem}_best_s"], entry[f"{stem}_median_s"] = best, round(med, 3)
            entry[f"{stem}_mb_per_s_best"] = round(mb / best, 1)
            entry[f"ratio_vs_direct_{stem}_best"] = round(best_direct / best, 3)
            entry[f"ratio_vs_direct_{stem}_median"] = round(med_direct / med, 3)
        if mode == "warm following":
            best_round = min(results, key=lambda r: r["from_commit_s"])
            entry["cpu_s_of_best"] = best_round["cpu_s_commit_to_all_committed"]
            entry["runs_started_for_backlog"] = [r["runs_started_for_backlog"] for r in results]
            out[mode] = entry
            continue
        best_round = min(results, key=lambda r: r["from_dagster_start_s"])
        entry["split_s_of_best"] = best_round["split_s"]
        entry["cpu_s_of_best"] = {
            "until_run_process_started": best_round["cpu_s_until_run_process_started"],
            "run_process_started_to_all_committed": best_round[
                "cpu_s_run_process_started_to_all_committed"
            ],
        }
        out[mode] = entry
    return out


if __name__ == "__main__":
    raise SystemExit(main())
