"""Expected faults named for a person: which resource, where, why, and what to do.

An unreachable broker, keeper, Spark Connect server or ClickHouse is the state of the world, not
a bug: a sensor tick says so in its skip reason (failed ticks counted in its cursor,
:class:`Streak`), a run fails with the same words (:func:`named_faults`). Anything else raises.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.resources import kafka_resource_key
from eos_pipeline.components.source import source_of
from eos_pipeline.core.errors import first_line
from eos_pipeline.core.retries import FailureFacts, Fault, diagnose

KAFKA = "Kafka broker"
KEEPER = "keeper (ZooKeeper)"
SPARK = "Spark Connect server"
CLICKHOUSE = "ClickHouse"
HUDI = "Hudi table"

_FIXES = {
    KAFKA: "start the broker (`eos-pipeline stack up` for the local stack) or correct "
    "kafka.bootstrap_servers; a clustered pipeline can move to another cluster with "
    "`eos-pipeline failover` (docs/failover.md)",
    KEEPER: "start ZooKeeper (`eos-pipeline stack up` for the local stack) or correct keeper.hosts",
    SPARK: "start the Spark Connect server (`eos-pipeline stack up` for the local stack) or "
    "correct spark.remote",
    CLICKHOUSE: "start the ClickHouse server or correct clickhouse.url (an embedded chDB path "
    "is opened by one process at a time)",
    HUDI: "check that hudi.path exists and is readable by this process",
}


@dataclass(frozen=True)
class NamedFault:
    """One expected fault: the resource, its endpoint, the error's first line, the fix."""

    resource: str
    endpoint: str
    cause: str
    #: Unreachable or timed out (retrying helps), as ``core.retries`` tells; else a refusal
    #: a person must act on (a missing topic, credentials).
    transient: bool = True

    @property
    def fix(self) -> str:
        if not self.transient:
            return "a retry will not help: correct what the cause names"
        return _FIXES[self.resource]

    @property
    def state(self) -> str:
        return "unreachable" if self.transient else "refused the request"

    def message(self) -> str:
        return f"{self.resource} {self.endpoint} {self.state}: {self.cause}. Fix: {self.fix}"


def _resource(context: Any, key: str) -> Any:
    """``context``'s resource ``key``, or None when the step did not ask for it."""
    try:
        return getattr(context.resources, key, None)
    except Exception:  # Dagster raises its own error for a resource the step did not require
        return None


def resource_endpoints(context: Any, pipeline: Pipeline) -> dict[str, str]:
    """Where each resource of ``pipeline`` lives, as its configuration and ``context``'s
    resources name it (secrets never)."""
    found = {KAFKA: source_of(pipeline).endpoint()}
    keeper = _resource(context, "keeper")
    if keeper is not None and keeper.hosts:
        found[KEEPER] = keeper.hosts
    if pipeline.hudi is not None:
        found[HUDI] = pipeline.hudi.path
    spark = _resource(context, "spark")
    if spark is not None:
        found[SPARK] = str(spark.remote) if spark.remote else "(in-process Spark)"
    clickhouse = _resource(context, "clickhouse")
    if clickhouse is not None:
        found[CLICKHOUSE] = re.sub(r"//[^/@]*@", "//", str(clickhouse.url))  # no credentials
    return found


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes, outer first (at most 20)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 20:
        yield current
        current = current.__cause__ or current.__context__
        seen += 1


def _resource_of(exc: BaseException) -> str | None:
    """Which resource an error comes from, by its classes (its own and its bases: a
    ``MirrorReadError`` is a ``KafkaReadError``) and their modules; no client is imported here
    (the sensor daemon never loads Spark)."""
    for cls in type(exc).__mro__:
        name, module = cls.__name__, cls.__module__ or ""
        if name in {"KafkaReadError", "KafkaException", "SwitchInProgress"} or module.startswith(
            "confluent_kafka"
        ):
            return KAFKA
        if name in {"KeeperUnavailableError", "KeeperAuthError"} or module.startswith("kazoo"):
            return KEEPER
        if name == "HudiTimelineError":
            return HUDI
        if (
            module.startswith(("pyspark", "grpc"))
            or module == "eos_pipeline.adapters.spark_remote"
            or name.startswith(("SparkConnect", "SparkServer"))
        ):
            return SPARK
        if module.startswith(("chdb", "clickhouse_connect")) or "ClickHouse" in name:
            return CLICKHOUSE
    return None


def name_fault(exc: BaseException, where: dict[str, str]) -> NamedFault | None:
    """The expected fault behind ``exc`` (its first cause that comes from a known resource),
    or None for anything else."""
    for err in chain(exc):
        resource = _resource_of(err)
        if resource is not None:
            cause = first_line(err)
            verdict = diagnose(FailureFacts(errors=((type(err).__name__, cause),)))
            transient = verdict.fault == Fault.TRANSIENT
            return NamedFault(resource, where.get(resource, "(endpoint unknown)"), cause, transient)
    return None


@dataclass(frozen=True)
class Streak:
    """Failed ticks in a row (and when the first was), kept in the sensor's cursor beside the
    sensor's own cursor ``inner``."""

    inner: str | None = None
    failures: int = 0
    since: float | None = None

    @classmethod
    def parse(cls, cursor: str | None) -> "Streak":
        if not cursor:
            return cls()
        try:
            data = json.loads(cursor)
        except ValueError:
            return cls(inner=cursor)  # a cursor written before the streak was kept
        if not isinstance(data, dict) or "failures" not in data:
            return cls(inner=cursor)
        return cls(data.get("inner"), int(data["failures"]), data.get("since"))

    def encode(self) -> str:
        return json.dumps({"inner": self.inner, "failures": self.failures, "since": self.since})

    def failed(self, now: float) -> "Streak":
        return Streak(self.inner, self.failures + 1, self.since or now)


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S UTC")


def skip_reason(fault: NamedFault, streak: Streak, interval: int, now: float) -> str:
    since = streak.since or now
    state = "unreachable" if fault.transient else "failing"
    return (
        f"{fault.resource} {fault.endpoint} {state} since {_clock(since)} "
        f"({streak.failures} failed tick{'s' if streak.failures != 1 else ''}): {fault.cause}; "
        f"next try at {_clock(now + interval)} (every {interval} s). Fix: {fault.fix}"
    )


Body = Callable[[dg.SensorEvaluationContext, str | None], dg.SensorResult | dg.SkipReason]
OnFault = Callable[[NamedFault, Streak], list[Any]]


def guarded(
    body: Body,
    where: Callable[[dg.SensorEvaluationContext], dict[str, str]],
    interval: int,
    on_fault: OnFault | None = None,
) -> Callable[[dg.SensorEvaluationContext], dg.SensorResult]:
    """A sensor evaluation that turns an expected fault into a skip reason (and the events
    ``on_fault`` gives, e.g. "unreachable since" observations), counting failed ticks in the
    cursor; ``body`` gets the sensor's own cursor and returns what a sensor returns."""

    def evaluate(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        streak = Streak.parse(context.cursor)
        now = time.time()
        try:
            result = body(context, streak.inner)
        except Exception as exc:
            fault = name_fault(exc, where(context))
            if fault is None:
                raise
            failed = streak.failed(now)
            if on_fault is not None:
                # the fault's events replace what the sensor last recorded: once reachable
                # again, its body records at once (its own cursor would say "no change")
                failed = replace(failed, inner=None)
            context.log.warning(fault.message())
            return dg.SensorResult(
                skip_reason=skip_reason(fault, failed, interval, now),
                cursor=failed.encode(),
                asset_events=on_fault(fault, failed) if on_fault else None,
            )
        if streak.failures:
            context.log.info(
                f"reachable again after {streak.failures} failed ticks since "
                f"{_clock(streak.since or now)}"
            )
        if isinstance(result, dg.SkipReason):
            cursor = Streak(streak.inner).encode() if streak.failures else None
            return dg.SensorResult(skip_reason=result, cursor=cursor)
        inner = result.cursor if result.cursor is not None else streak.inner
        changed = streak.failures or result.cursor is not None
        return dg.SensorResult(
            run_requests=result.run_requests,
            skip_reason=result.skip_reason,
            cursor=Streak(inner).encode() if changed else None,
            dynamic_partitions_requests=result.dynamic_partitions_requests,
            asset_events=result.asset_events,
        )

    return evaluate


def pipeline_sensor(
    pipeline: Pipeline,
    suffix: str,
    interval: int,
    body: Body,
    description: str,
    keeper: bool,
    target: dg.AssetKey | None = None,
    on_fault: OnFault | None = None,
) -> dg.SensorDefinition:
    """``<pipeline>_<suffix>``: ``body`` :func:`guarded`, with ``pipeline``'s Kafka resource
    (and the keeper if ``keeper``)."""

    evaluate = guarded(body, lambda ctx: resource_endpoints(ctx, pipeline), interval, on_fault)

    @dg.sensor(
        name=f"{pipeline.name}_{suffix}",
        minimum_interval_seconds=interval,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={kafka_resource_key(pipeline.name)}
        | ({"keeper"} if keeper else set()),
        target=None if target is None else dg.AssetSelection.assets(target),
        description=description,
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        return evaluate(context)

    return _sensor


@contextmanager
def named_faults(context: Any, pipeline: Pipeline) -> Iterator[None]:
    """Inside a run: an expected fault leaves as a ``dg.Failure`` in the words a sensor's skip
    reason uses (the original error stays its cause, so the retry rules still read it);
    anything else leaves unchanged."""
    try:
        yield
    except dg.Failure:
        raise
    except Exception as exc:
        fault = name_fault(exc, resource_endpoints(context, pipeline))
        if fault is None:
            raise
        metadata = {"resource": fault.resource, "endpoint": fault.endpoint, "fix": fault.fix}
        raise dg.Failure(description=fault.message(), metadata=metadata) from exc
