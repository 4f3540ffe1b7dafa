"""A pipeline of apps whose drivers are killed with kill -9 and restarted while it runs.

App `filter` (stateless) reads the input stream and writes the events it keeps to a middle
stream; app `agg` counts and sums the middle stream per category and minute: a SQL app into a
result table, or a processor (`Aggregator.PROCESSOR`) producing each minute to a result stream
once the watermark passes it, which a third app, `total` (SQL), sums per category and minute
into a result table. Every app after the filter reads its input with no lateness: the
watermark markers of the app writing it move its watermark (docs/concepts.md, Time).

Each app runs as `millrace run` does for a user, in a process group of its own, killed whole
(Python and Spark's JVM) with SIGKILL and started again. The filter is killed just after its
micro-batch has started writing to the middle stream (its end offsets moved) and so, most of
the time, before Spark has recorded the batch done: the re-run writes the batch again, which
makes the copies a reader must drop. The aggregation and the third app are killed at
random moments of its micro-batches, spread over the first seconds after a commit: kill k of n
comes in the k-th n-th of them, so that a few kills reach early, middle and late moments
alike. Then both apps are run to the end of their input with `--available-now`; only then are
records far ahead of the others (the closing records) written to the middle stream, to move
the aggregation's watermark past every minute. The answer is computed in plain Python from the
events.

Used by tests/runtime/test_exactly_once.py (a bounded run in CI, and a longer soak run).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream, describe_stream
from millrace.config.workspace import Workspace
from millrace.engine.streams import write_batch
from millrace.records import event_time_ms
from millrace.runtime.sql_apps import query_result_table

START_MS = 1_767_225_600_000
STEP_MS = 10
MINUTE_MS = 60_000
CATEGORIES = 7
CLOSING_CATEGORY = "zz_closing"
# Each closing record goes to a middle bucket chosen by a hash of its id: with 64 of them, a
# middle bucket misses them in one run in 2**63.
CLOSING_RECORDS = 64
# The filter waits this long for its next write before it is killed anyway (at the end of
# its input, no batch comes).
_ARMED_TIMEOUT_S = 20.0
# The aggregation is killed within this long of seeing its micro-batch committed.
_AGG_KILL_SPAN_S = 3.0
# The micro-batch size of the run to the end, after the kills.
_FINISHING_BATCH = 100_000

FILTER_APP = """
CREATE APPLICATION {name} WITH (semantics = '{semantics}', max_records_per_batch = '{batch}');
CREATE INPUT TABLE events (event_time, category, amount INT)
  FROM STREAM('{source}') TIME event_time LATENESS '5 minutes';
INSERT INTO STREAM('{middle}')
SELECT event_time, category, amount FROM events WHERE amount % 3 <> 0;
"""

AGG_APP = """
CREATE APPLICATION {name} WITH (semantics = '{semantics}', max_records_per_batch = '{batch}');
CREATE INPUT TABLE kept (event_time, category, amount INT)
  FROM STREAM('{middle}') TIME event_time LATENESS '0 seconds';
CREATE TABLE per_minute AS
SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM kept [1 minute] GROUP BY category;
"""

# Both aggregations read the middle stream with no lateness: within one middle bucket the
# records are in time order only micro-batch by micro-batch of the filter, but the filter's
# watermark markers, not the records' times, move the readers' watermark (docs/concepts.md,
# Time), so no kept event is late, whatever the kills.
AGG_PROCESSOR = """
from millrace import Input, MapState, Processor


class CrashAggregation(Processor):
    name = "{name}"
    semantics = "{semantics}"
    max_records_per_batch = {batch}
    inputs = [Input("{middle}", key="category", time="event_time", lateness="0s")]
    per_minute = MapState(key=int, value=list)

    def on_record(self, key, record, ctx):
        minute = ctx.event_time_ms // {minute_ms} * {minute_ms}
        count, total = self.per_minute.get(minute, [0, 0])
        self.per_minute[minute] = [count + 1, total + record["amount"]]
        ctx.set_timer(f"close-{{minute}}", event_time_ms=minute + {minute_ms})

    def on_timer(self, key, timer, ctx):
        minute = timer.time_ms - {minute_ms}
        count, total = self.per_minute.pop(minute)
        ctx.produce(
            "{results}",
            {{"category": key, "minute_ms": minute, "n": count, "total": total}},
            time_ms=minute + {minute_ms} - 1,
        )
"""

# The third app of the processor's pipeline: the processor's productions, dated by the time
# their `time` header carries (the minute's last millisecond), summed per category and minute.
TOTAL_APP = """
CREATE APPLICATION {name} WITH (semantics = '{semantics}', max_records_per_batch = '{batch}');
CREATE INPUT TABLE minutes (event_time, category, n BIGINT, total BIGINT)
  FROM STREAM('{results}') TIME event_time LATENESS '0 seconds';
CREATE TABLE per_minute AS
SELECT category, SUM(n) AS n, SUM(total) AS total FROM minutes [1 minute] GROUP BY category;
"""


class Aggregator(Enum):
    """Which kind of app aggregates the middle stream."""

    SQL = "sql"
    PROCESSOR = "processor"


def event(number: int) -> dict:
    """Event `number` of the input: 10 ms apart, in order, 7 categories, amounts 0-99."""
    return {
        "event_time": START_MS + number * STEP_MS,
        "category": f"c{number % CATEGORIES}",
        "amount": (number * 37) % 100,
    }


def known_answer(events: int) -> dict[tuple[int, str], tuple[int, int]]:
    """(minute since START_MS, category) -> (count, sum of amounts) of the kept events."""
    answer: dict[tuple[int, str], tuple[int, int]] = {}
    for number in range(events):
        record = event(number)
        if record["amount"] % 3 == 0:
            continue
        key = ((record["event_time"] - START_MS) // MINUTE_MS, record["category"])
        count, total = answer.get(key, (0, 0))
        answer[key] = (count + 1, total + record["amount"])
    return answer


def _publish(
    spark: SparkSession, workspace: Workspace, stream: str, numbers: range, events: int, run: str
) -> None:
    """Write the records `numbers` of a run of `events` events. Numbers from `events` on are
    the closing records, an hour after the last event, which move the watermark past every
    minute: `CLOSING_RECORDS` of them, so that each bucket of the middle stream gets one (a
    watermark is the least over the buckets).

    Spark writes them, from one task, so that both buckets hold them in time order (the
    Python publisher takes minutes for a million), each to a bucket chosen by a hash of its id
    (`write_batch`), so that the buckets hold about the same stretch of time at the same
    offsets. Each has an id of its own.
    """
    number = F.col("id")
    closing = number >= events
    frame = spark.range(numbers.start, numbers.stop, 1, numPartitions=1).select(
        F.when(closing, START_MS + events * STEP_MS + 3600_000)
        .otherwise(START_MS + number * STEP_MS)
        .alias("event_time"),
        F.when(closing, F.lit(CLOSING_CATEGORY))
        .otherwise(F.concat(F.lit("c"), (number % CATEGORIES).cast("string")))
        .alias("category"),
        F.when(closing, F.lit(1)).otherwise((number * 37) % 100).cast("int").alias("amount"),
        F.concat(F.lit(f"in-{run}-"), number.cast("string")).alias("record_id"),
    )
    write_batch(frame, workspace, stream)


@dataclass
class _App:
    """One app's process, what it has committed, and its kills and restarts."""

    name: str
    target: str
    commits: Path
    log: Path
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    baseline: int = -1
    armed_at: float | None = None
    armed_offsets: int = 0
    kill_delay_s: float = 0.0
    kills: int = 0
    restart_to_batch_s: list[float] = field(default_factory=list)

    def last_commit(self) -> int:
        if not self.commits.is_dir():
            return -1
        numbers = [int(path.name) for path in self.commits.iterdir() if path.name.isdigit()]
        return max(numbers, default=-1)

    def start(self, *arguments: str) -> subprocess.Popen:
        with open(self.log, "a") as log:
            log.write(f"\n==== start {time.strftime('%H:%M:%S')} {' '.join(arguments)}\n")
            log.flush()
            return subprocess.Popen(
                [sys.executable, "-m", "millrace.cli.main", "run", self.target, *arguments],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=os.environ,
                start_new_session=True,
            )

    def launch(self) -> None:
        self.baseline = self.last_commit()
        self.armed_at = None
        self.started_at = time.monotonic()
        self.process = self.start()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def finish(self) -> None:
        """Run the app to the end of its input (`--available-now`) and see it end well."""
        finished = self.start("--available-now")
        try:
            finished.wait(timeout=1800)
        finally:
            if finished.poll() is None:
                os.killpg(finished.pid, signal.SIGKILL)
        assert finished.returncode == 0, f"{self.name} did not finish:\n{self.log_tail()}"

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


@dataclass(frozen=True)
class CrashRun:
    """What a run saw: the result table, the middle stream's records, the kills."""

    results: dict[tuple[int, str], tuple[int, int]]
    middle_ids: Counter
    middle_counts: dict[tuple[int, str], int]
    kills: dict[str, int]
    restart_to_batch_s: list[float]
    events: int

    @property
    def copies_in_middle(self) -> int:
        """Records of the middle stream that repeat an id written before (re-run batches)."""
        return sum(count - 1 for count in self.middle_ids.values())

    def summary(self, answer: dict[tuple[int, str], tuple[int, int]]) -> dict:
        counted = sum(n for n, _ in self.results.values())
        expected = sum(n for n, _ in answer.values())
        missing = sum(
            max(0, n - self.results.get(key, (0, 0))[0]) for key, (n, _) in answer.items()
        )
        return {
            "events": self.events,
            "kills": self.kills,
            "events_lost": missing,
            "counted_twice": max(0, counted - expected),
            "copies_in_middle_stream": self.copies_in_middle,
            "median_restart_to_first_batch_s": (
                round(statistics.median(self.restart_to_batch_s), 1)
                if self.restart_to_batch_s
                else None
            ),
        }


def run_with_kills(
    spark: SparkSession,
    workspace: Workspace,
    folder: Path,
    *,
    run: str,
    semantics: str,
    events: int,
    kills: int,
    batch: int,
    seed: int,
    aggregator: Aggregator = Aggregator.SQL,
    timeout_s: float = 900.0,
) -> CrashRun:
    """Publish `events`, run the pipeline, kill each app `kills` times, then finish it."""
    rng = random.Random(seed)
    source, middle = f"test.crash-in.{run}", f"test.crash-mid.{run}"
    results = f"test.crash-out.{run}"
    processor = aggregator is Aggregator.PROCESSOR
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, middle, buckets=2)
    if processor:
        create_stream(workspace.settings, results, buckets=1)
    _publish(spark, workspace, source, range(events), events, run)
    names = {"filter": f"crash_filter_{run}", "agg": f"crash_agg_{run}"}
    templates = {"filter": FILTER_APP, "agg": AGG_PROCESSOR if processor else AGG_APP}
    files = {
        "filter": folder / "filter.sql",
        "agg": folder / ("agg.py" if processor else "agg.sql"),
    }
    if processor:
        names["total"] = f"crash_total_{run}"
        templates["total"] = TOTAL_APP
        files["total"] = folder / "total.sql"

    def write_app(role: str, batch: int) -> None:
        files[role].write_text(
            templates[role].format(
                name=names[role],
                semantics=semantics,
                batch=batch,
                source=source,
                middle=middle,
                results=results,
                minute_ms=MINUTE_MS,
            )
        )

    queries = {
        "filter": f"insert.{middle}",
        "agg": "processor" if processor else "table.per_minute",
        "total": "table.per_minute",
    }
    for role in files:
        write_app(role, batch)
    apps = {
        role: _App(
            names[role],
            f"{files[role]}:CrashAggregation" if files[role].suffix == ".py" else str(files[role]),
            workspace.checkpoint(names[role], queries[role]) / "commits",
            folder / f"{role}.log",
        )
        for role in files
    }

    def middle_end() -> int:
        return sum(
            bucket.end_offset for bucket in describe_stream(workspace.settings, middle).buckets
        )

    try:
        for app in apps.values():
            app.launch()
        while any(app.kills < kills for app in apps.values()):
            for role, app in apps.items():
                if app.kills >= kills:
                    continue
                assert app.process is not None
                if app.process.poll() is not None:
                    raise AssertionError(f"{role} stopped by itself:\n{app.log_tail()}")
                now = time.monotonic()
                if app.armed_at is None:
                    if app.last_commit() > app.baseline:
                        if app.kills:
                            app.restart_to_batch_s.append(now - app.started_at)
                        app.armed_at = now
                        app.armed_offsets = middle_end()
                        app.kill_delay_s = _AGG_KILL_SPAN_S * (app.kills + rng.random()) / kills
                    elif now - app.started_at > timeout_s:
                        raise AssertionError(
                            f"{role}: no new micro-batch within {timeout_s} s:\n{app.log_tail()}"
                        )
                    continue
                # The filter dies once its running micro-batch has written some records; the
                # aggregation at a random moment.
                due = (
                    middle_end() > app.armed_offsets
                    if role == "filter"
                    else now - app.armed_at >= app.kill_delay_s
                )
                if due or now - app.armed_at > _ARMED_TIMEOUT_S:
                    app.kill()
                    app.kills += 1
                    app.launch()
            # Each look at the middle stream's end offsets is a few requests to the broker.
            time.sleep(0.25)
    finally:
        for app in apps.values():
            app.kill()
    # The end: each app processes what its input holds, in larger micro-batches, and stops.
    # The closing records are written to the middle stream once the filter has written every
    # event, so that they are the last records of their middle buckets. Had they come amid the
    # events, the filter's two tasks writing to the middle stream at once could put them ahead
    # of events not yet written, and the aggregation would set those aside as late once they
    # had moved its watermark. (The filter would pass them as they are: a run of it for them
    # alone would cost one more Spark start and show nothing.)
    for role in files:
        write_app(role, _FINISHING_BATCH)
    apps["filter"].finish()
    _publish(spark, workspace, middle, range(events, events + CLOSING_RECORDS), events, run)
    apps["agg"].finish()
    if processor:
        apps["total"].finish()
        produced = _results_of_table(spark, workspace, apps["total"].name)
    else:
        produced = _results_of_table(spark, workspace, apps["agg"].name)
    return _observe(workspace, apps, middle, events, produced)


def _results_of_table(
    spark: SparkSession, workspace: Workspace, app: str
) -> dict[tuple[int, str], tuple[int, int]]:
    """(minute, category) -> (count, sum) from the SQL app's result table."""
    rows = query_result_table(spark, workspace, app, "per_minute")
    return {
        (
            (int(row["window_start"].timestamp() * 1000) - START_MS) // MINUTE_MS,
            row["category"],
        ): (row["n"], row["total"])
        for row in rows
    }


def _observe(
    workspace: Workspace,
    apps: dict[str, _App],
    middle: str,
    events: int,
    results: dict[tuple[int, str], tuple[int, int]],
) -> CrashRun:
    ids: Counter = Counter()
    counts: Counter = Counter()
    for record in tail(middle, TailStart(from_beginning=True), settings=workspace.settings):
        if record.value["category"] == CLOSING_CATEGORY:
            continue
        ids[record.id] += 1
        minute = (event_time_ms(record.value, "event_time") - START_MS) // MINUTE_MS
        counts[(minute, record.value["category"])] += 1
    return CrashRun(
        results=results,
        middle_ids=ids,
        middle_counts=dict(counts),
        kills={role: app.kills for role, app in apps.items()},
        restart_to_batch_s=[s for app in apps.values() for s in app.restart_to_batch_s],
        events=events,
    )
