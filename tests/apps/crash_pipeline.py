"""A pipeline of apps whose drivers are killed with kill -9 and restarted while it runs.

App `filter` (stateless) reads the input stream and writes the events it keeps to a middle
stream. Two pipelines read it:

- `Pipeline.SQL`: two SQL apps count and sum the middle stream per category and minute into a
  result table each, one `exactly_once`, one `at_least_once`;
- `Pipeline.PROCESSOR`: a processor does the same in its keys' state and produces each minute
  to a result stream once the watermark passes it; a third app, `total` (SQL), sums the
  productions per category and minute into a result table.

Every app after the filter reads its input with no lateness: the watermark markers of the app
writing it move its watermark (docs/concepts.md, Time).

Each app runs as `millrace run` does for a user, in a process group of its own, killed whole
(Python and Spark's JVM) with SIGKILL and started again. Every app killed is killed at the
moment where exactly-once can break: once its running micro-batch has written its output and
before Spark has recorded the batch done. The filter's and the
processor's re-runs write their records again, with the same ids: the copies a reader must
drop. An aggregation's re-run finds its batch appended to the result table already and
writes nothing, but still runs the batch so that its state is committed (Spark 4 refuses to
go on otherwise). The test watches the output and the checkpoint; a kill counts once the
checkpoint shows the batch left uncommitted, and one that came too late is followed by
another; should an app short of its kills have read all its input, the test publishes more
events (the answer counts them), so that a next micro-batch comes. After its last kill each
app is run to the end of its input with `--available-now`, which first runs the uncommitted
batch again; only once the filter has written every event are records far ahead of the
others (the closing records) written to the middle stream, to move the readers' watermark
past every minute. The answer is computed in plain Python from the events.

Used by tests/apps/test_exactly_once.py (a bounded run in CI, and a longer soak run), and its
apps, events and answer by tests/ops/test_host.py (the host killed under a chain of apps).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.bus.internal import StreamWatch
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.writes import write_batch
from millrace.records import event_time_ms
from millrace.warehouse.result_tables import read_result_rows

START_MS = 1_767_225_600_000
# A micro-batch of 2,000 events then spans a minute: most micro-batches of the readers close a
# window once the filter's watermark (its lateness behind) has passed it, and so write.
STEP_MS = 30
MINUTE_MS = 60_000
CATEGORIES = 7
CLOSING_CATEGORY = "zz_closing"
# Each closing record goes to a middle bucket chosen by a hash of its id: with 64 of them, a
# middle bucket misses them in one run in 2**63.
CLOSING_RECORDS = 64
# How often the test looks at an app's checkpoint and, once it waits for the app's write, at
# its output: the kill must land between the write and Spark's commit, a fraction of a second.
_POLL_S = 0.25
_ARMED_POLL_S = 0.01
# An app short of its kills, armed this long with no micro-batch writing, has read all its input
# (each kill came after Spark's commit, so did not count): the test then publishes a
# micro-batch's worth of events more, so that a micro-batch comes that writes, to be killed in.
_STARVED_S = 30.0
# What a stream's end may move by with no micro-batch writing: the watermark markers an app
# publishes to each bucket after a commit (one per bucket, two if its held-back time moves
# apart). A micro-batch of the filter writes hundreds of records per bucket, one of the
# processor's seven productions or none.
_FILTER_MARKERS = 50
_PROCESSOR_MARKERS = 3
# The micro-batch size of the run to the end, after the kills.
_FINISHING_BATCH = 100_000
# Generous: on a busy machine a Spark start takes minutes.
_FINISH_TIMEOUT_S = 1800

FILTER_APP = """
CREATE APPLICATION {name} WITH (max_records_per_batch = '{batch}');
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
CREATE APPLICATION {name} WITH (max_records_per_batch = '{batch}');
CREATE INPUT TABLE minutes (event_time, category, n BIGINT, total BIGINT)
  FROM STREAM('{results}') TIME event_time LATENESS '0 seconds';
CREATE TABLE per_minute AS
SELECT category, SUM(n) AS n, SUM(total) AS total FROM minutes [1 minute] GROUP BY category;
"""


class Pipeline(Enum):
    """Which apps read the filter's middle stream (see the module)."""

    SQL = "sql"
    PROCESSOR = "processor"


def event(number: int) -> dict:
    """Event `number` of the input: 30 ms apart, in order, 7 categories, amounts 0-99."""
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


def publish(
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


def _last_number(folder: Path) -> int:
    """The highest numbered file of a checkpoint's `offsets` or `commits`; -1 when none."""
    if not folder.is_dir():
        return -1
    return max((int(path.name) for path in folder.iterdir() if path.name.isdigit()), default=-1)


@dataclass
class _App:
    """One app's process, its checkpoint, and its kills and restarts.

    `source` gives the app's text for a micro-batch size; `killed` whether the app is killed
    after a micro-batch wrote and before Spark recorded it done (else it is only run to the
    end). `written` tells how much the app has written to its output so far, `markers` how
    far that may move with no micro-batch writing.
    """

    name: str
    file: Path
    source: Callable[[int], str]
    checkpoint: Path
    log: Path
    killed: bool = False
    written: Callable[[], int] = lambda: 0
    markers: int = 0
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    baseline: int = -1
    armed_commit: int | None = None
    armed_written: int = 0
    armed_at: float = 0.0
    kills: int = 0
    attempts: int = 0
    restart_to_batch_s: list[float] = field(default_factory=list)

    def last_commit(self) -> int:
        return _last_number(self.checkpoint / "commits")

    def write_source(self, batch: int) -> None:
        self.file.write_text(self.source(batch))

    def start(self, *arguments: str) -> subprocess.Popen:
        target = f"{self.file}:CrashAggregation" if self.file.suffix == ".py" else str(self.file)
        with open(self.log, "a") as log:
            log.write(f"\n==== start {time.strftime('%H:%M:%S')} {' '.join(arguments)}\n")
            log.flush()
            return subprocess.Popen(
                [sys.executable, "-m", "millrace.cli.main", "run", target, *arguments],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=os.environ,
                start_new_session=True,
            )

    def launch(self, *arguments: str) -> None:
        self.baseline = self.last_commit()
        self.armed_commit = None
        self.started_at = time.monotonic()
        self.process = self.start(*arguments)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def watch(self, role: str, kills: int, timeout_s: float) -> None:
        """One look at the running app: note a new commit, or kill it if its next micro-batch
        has written (and relaunch it, unless that was its last kill)."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"{role} stopped by itself:\n{self.log_tail()}")
        now = time.monotonic()
        commit = self.last_commit()
        if commit > self.baseline and commit != self.armed_commit:
            if self.armed_commit is None:
                # Armed since: a micro-batch that writes nothing (a quiet input's) arms again.
                self.armed_at = now
                if self.attempts:
                    self.restart_to_batch_s.append(now - self.started_at)
            self.armed_commit, self.armed_written = commit, self.written()
            return
        if self.armed_commit is None or not self._due():
            waiting = "micro-batch" if self.armed_commit is None else "micro-batch that writes"
            since = self.started_at if self.armed_commit is None else self.armed_at
            if now - since > timeout_s:
                raise AssertionError(
                    f"{role}: no {waiting} within {timeout_s} s:\n{self.log_tail()}"
                )
            return
        self.kill()
        self.attempts += 1
        # The kill counts if Spark had not recorded done the batch after the armed commit.
        if self.last_commit() == self.armed_commit:
            self.kills += 1
        if self.kills < kills:
            self.launch()

    def _due(self) -> bool:
        """Whether the micro-batch after the armed commit has written."""
        return self.written() > self.armed_written + self.markers

    def run_to_the_end(self, batch: int = _FINISHING_BATCH) -> None:
        """Start the app with `--available-now` and micro-batches of `batch` (`finished`
        waits)."""
        self.write_source(batch)
        self.launch("--available-now")

    def finished(self) -> None:
        """Wait for the run to the end of the input and see it end well."""
        process = self.process
        assert process is not None
        try:
            process.wait(timeout=_FINISH_TIMEOUT_S)
        finally:
            self.kill()
        assert process.returncode == 0, f"{self.name} did not finish:\n{self.log_tail()}"

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


@dataclass(frozen=True)
class CrashRun:
    """What a run saw: the result tables, the middle stream's records, the kills.

    `results` maps the role of each app with a result table (`exactly_once`, `at_least_once`
    or `total`) to its rows; `copies_in_results` counts the productions of the processor's
    result stream that repeat an id written before.
    """

    results: dict[str, dict[tuple[int, str], tuple[int, int]]]
    middle_ids: Counter
    middle_counts: dict[tuple[int, str], int]
    copies_in_results: int
    kills: dict[str, int]
    attempts: dict[str, int]
    restart_to_batch_s: list[float]
    events: int

    @property
    def copies_in_middle(self) -> int:
        """Records of the middle stream that repeat an id written before (re-run batches)."""
        return sum(count - 1 for count in self.middle_ids.values())

    def summary(self, answer: dict[tuple[int, str], tuple[int, int]]) -> dict:
        expected = sum(n for n, _ in answer.values())
        tables = {}
        for role, results in self.results.items():
            counted = sum(n for n, _ in results.values())
            missing = sum(max(0, n - results.get(key, (0, 0))[0]) for key, (n, _) in answer.items())
            tables[role] = {"events_lost": missing, "counted_twice": max(0, counted - expected)}
        return {
            "events": self.events,
            "kills": self.kills,
            "kill_attempts": self.attempts,
            "results": tables,
            "copies_in_middle_stream": self.copies_in_middle,
            "copies_in_result_stream": self.copies_in_results,
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
    events: int,
    kills: int,
    batch: int,
    pipeline: Pipeline = Pipeline.SQL,
    timeout_s: float = 900.0,
) -> CrashRun:
    """Publish `events`, run the pipeline, kill each app but `total` `kills` times at its
    write, then run each to the end."""
    source, middle = f"test.crash-in.{run}", f"test.crash-mid.{run}"
    results = f"test.crash-out.{run}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, middle, buckets=2)
    if pipeline is Pipeline.PROCESSOR:
        create_stream(workspace.settings, results, buckets=1)
    publish(spark, workspace, source, range(events), events, run)

    def new_app(role: str, template: str, query: str, semantics: str = "exactly_once") -> _App:
        name = f"crash_{role}_{run}"
        values = {"name": name, "semantics": semantics, "minute_ms": MINUTE_MS}
        values |= {"source": source, "middle": middle, "results": results}

        def text(batch: int) -> str:
            return template.format(batch=batch, **values)

        suffix = ".py" if template is AGG_PROCESSOR else ".sql"
        made = _App(
            name,
            folder / f"{role}{suffix}",
            text,
            workspace.checkpoint(name, query),
            folder / f"{role}.log",
        )
        made.write_source(batch)
        return made

    watches: list[StreamWatch] = []

    def stream_end(stream: str) -> Callable[[], int]:
        # One connection asked again and again: a look must take milliseconds, since the kill
        # must land between the write it sees and Spark's commit.
        watch = StreamWatch(workspace.settings, stream)
        watches.append(watch)
        return lambda: sum(watch.end_offsets().values())

    apps = {"filter": new_app("filter", FILTER_APP, f"insert.{middle}")}
    apps["filter"].killed = True
    apps["filter"].written, apps["filter"].markers = stream_end(middle), _FILTER_MARKERS
    if pipeline is Pipeline.SQL:
        for semantics in ("exactly_once", "at_least_once"):
            apps[semantics] = new_app(semantics, AGG_APP, "table.per_minute", semantics)
            apps[semantics].killed = True
            apps[semantics].written = _table_versions(
                workspace.result_table(apps[semantics].name, "per_minute")
            )
    else:
        apps["processor"] = new_app("processor", AGG_PROCESSOR, "processor")
        apps["processor"].killed = True
        apps["processor"].written = stream_end(results)
        apps["processor"].markers = _PROCESSOR_MARKERS
        apps["total"] = new_app("total", TOTAL_APP, "table.per_minute")
    killed = {role: app for role, app in apps.items() if app.killed}

    published, fed_at = events, time.monotonic()
    filter_ = apps["filter"]
    filter_read_to = 0

    def filter_to_the_end() -> None:
        """Run the filter to the end of the events published, when it has not yet."""
        nonlocal filter_read_to
        if filter_.process is not None and filter_.process.poll() is None:
            return
        if filter_.process is not None and filter_.process.returncode != 0:
            raise AssertionError(f"filter did not finish:\n{filter_.log_tail()}")
        if filter_read_to < published:
            filter_read_to = published
            filter_.run_to_the_end(batch)

    try:
        for app in killed.values():
            app.launch()
        while any(app.kills < kills for app in killed.values()):
            for role, app in killed.items():
                if app.kills < kills:
                    app.watch(role, kills, timeout_s)
            now = time.monotonic()
            short = [app for app in killed.values() if app.kills < kills]
            if now - fed_at > _STARVED_S and any(
                app.armed_commit is not None and now - app.armed_at > _STARVED_S for app in short
            ):
                fed = range(published, published + batch)
                publish(spark, workspace, source, fed, fed.stop, run)
                published, fed_at = fed.stop, now
            # The filter runs to the end of its input once its kills are done, while the apps
            # after it, still at theirs, read what it writes. Its micro-batches stay small:
            # its markers after each one move the readers' watermarks, so that their
            # micro-batches close windows (and write) all along the middle stream.
            if filter_.kills >= kills:
                filter_to_the_end()
            armed = any(app.armed_commit is not None for app in short)
            time.sleep(_ARMED_POLL_S if armed else _POLL_S)
        filter_.finished()
        if filter_read_to < published:
            # Events published after its last run to the end had started.
            filter_to_the_end()
            filter_.finished()
        events = published
        # The closing records come once the filter has written every event, so that they are
        # the last records of their middle buckets. Had they come amid the events, the
        # filter's two tasks writing to the middle stream at once could put them ahead of
        # events not yet written, and the readers would set those aside as late once they had
        # moved their watermark.
        publish(spark, workspace, middle, range(events, events + CLOSING_RECORDS), events, run)
        after_filter = [app for role, app in killed.items() if role != "filter"]
        for app in after_filter:
            app.run_to_the_end()
        for app in after_filter:
            app.finished()
        if pipeline is Pipeline.PROCESSOR:
            apps["total"].run_to_the_end()
            apps["total"].finished()
    finally:
        for app in apps.values():
            app.kill()
        for watch in watches:
            watch.close()
    tables = ["exactly_once", "at_least_once"] if pipeline is Pipeline.SQL else ["total"]
    middle_ids, middle_counts = middle_records(workspace, middle)
    return CrashRun(
        results={role: results_of_table(spark, workspace, apps[role].name) for role in tables},
        middle_ids=middle_ids,
        middle_counts=middle_counts,
        copies_in_results=_copies(workspace, results) if pipeline is Pipeline.PROCESSOR else 0,
        kills={role: app.kills for role, app in killed.items()},
        attempts={role: app.attempts for role, app in killed.items()},
        restart_to_batch_s=[s for app in killed.values() for s in app.restart_to_batch_s],
        events=events,
    )


def _table_versions(table: Path) -> Callable[[], int]:
    """How many commits a Delta table has: an aggregation appends one each micro-batch."""

    def count() -> int:
        log = table / "_delta_log"
        if not log.is_dir():
            return 0
        return sum(1 for path in log.glob("*.json") if path.stem.isdigit())

    return count


def results_of_table(
    spark: SparkSession, workspace: Workspace, app: str
) -> dict[tuple[int, str], tuple[int, int]]:
    """(minute, category) -> (count, sum) from the SQL app's result table."""
    rows = read_result_rows(workspace, app, "per_minute")
    return {
        (
            (int(row["window_start"].timestamp() * 1000) - START_MS) // MINUTE_MS,
            row["category"],
        ): (row["n"], row["total"])
        for row in rows
    }


def middle_records(workspace: Workspace, middle: str) -> tuple[Counter, dict[tuple[int, str], int]]:
    """The middle stream's records but the closing ones: how often each id was written, and
    how many records each (minute, category) got, copies included."""
    ids: Counter = Counter()
    counts: Counter = Counter()
    for record in tail(middle, TailStart(from_beginning=True), settings=workspace.settings):
        if record.value["category"] == CLOSING_CATEGORY:
            continue
        ids[record.id] += 1
        minute = (event_time_ms(record.value, "event_time") - START_MS) // MINUTE_MS
        counts[(minute, record.value["category"])] += 1
    return ids, dict(counts)


def _copies(workspace: Workspace, stream: str) -> int:
    """Records of `stream` that repeat an id written before."""
    ids = Counter(
        record.id
        for record in tail(stream, TailStart(from_beginning=True), settings=workspace.settings)
    )
    return sum(count - 1 for count in ids.values())
