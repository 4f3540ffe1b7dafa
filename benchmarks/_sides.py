"""The sides a SQL benchmark compares: a millrace app, hand-written PySpark, and the ceiling.

Each side runs a streaming query over the whole of a loaded stream (trigger available-now, a
fresh checkpoint each time) and reports a `Run`; `compare` interleaves the sides over rounds
after a warm-up round, checks that the millrace app and the hand-written query wrote the same
rows, and reports events/s and the ratios of the medians. For the sustained-rate search each
side can also start without an end (`Started`), for `_load.probe` to watch.
"""

from __future__ import annotations

import random
import resource
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from _harness import Run, cpu_seconds, processing_seconds
from _load import Payloads, probe, processed_offsets, search, summarize
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from millrace.engine import spark_internals

BASELINE = "handwritten_pyspark"
WARMUP_RUNS = 12
"""Runs, all sides together, before the kept rounds. Measured on 2026-11-25 with three sides
over 1,000,000 events after one warm-up run of each, each side's median over the first
three rounds was 16 to 21% below its median over the five after them: one warm-up round of
two or three sides leaves the JVM cold."""
HANDWRITTEN_STATE_STORE = "memory"
"""Where hand-written queries keep their state: Spark's default store, which a SQL app uses
unless it asks for RocksDB, so that the two sides differ by their plans, not their stores."""


@dataclass
class Started:
    """Queries started without an end, reading `stream`, for a sustained-rate probe."""

    queries: list[StreamingQuery]
    stream: str
    on_stop: Callable[[], None] | None = None
    """How to stop them, when stopping each query is not all (a millrace app's `stop`)."""
    progress: Callable[[], list[dict]] | None = None
    """The micro-batches' progress, when the queries run in another process (a deployed app)."""

    def processed_offsets(self) -> dict[int, int]:
        """The next offset per bucket that all the queries have processed."""
        return processed_offsets(self.queries, self.stream)

    def stop(self) -> None:
        """Stop every query."""
        if self.on_stop is not None:
            self.on_stop()
            return
        for query in self.queries:
            query.stop()


def at_least_once(app_text: str) -> str:
    """The app with `semantics = 'at_least_once'`: its input is not deduplicated by record id.

    Example:
        >>> at_least_once("CREATE APPLICATION a_{run}; CREATE TABLE t AS SELECT 1;")
        "CREATE APPLICATION a_{run} WITH (semantics = 'at_least_once'); CREATE TABLE t AS SELECT 1;"
    """
    return _with_option(app_text, "semantics", "at_least_once")


def on_rocksdb(app_text: str) -> str:
    """The app with `state_store = 'rocksdb'`: its state on disk, not on the JVM heap.

    Example:
        >>> on_rocksdb("CREATE APPLICATION a_{run}; CREATE TABLE t AS SELECT 1;")
        "CREATE APPLICATION a_{run} WITH (state_store = 'rocksdb'); CREATE TABLE t AS SELECT 1;"
    """
    return _with_option(app_text, "state_store", "rocksdb")


def _with_option(app_text: str, key: str, value: str) -> str:
    application, rest = app_text.split(";", 1)
    return f"{application} WITH ({key} = '{value}');{rest}"


def millrace_app(spark: SparkSession, workspace, app_text: str, available_now: bool = True):
    """The app `app_text` (with `{run}` for a fresh name), as `millrace run` runs it.

    With `available_now` it runs over all its input and gives a `Run` whose output is its first
    result table; otherwise it keeps running and gives the `RunningApp`.
    """
    from millrace.apps.sql.running import start_sql_app
    from millrace.sql.parser import parse_app

    app = parse_app(app_text.format(run=uuid.uuid4().hex[:8]))
    started = time.perf_counter()
    running = start_sql_app(spark, workspace, app, available_now=available_now)
    if not available_now:
        return running
    running.await_termination()
    wall_s = time.perf_counter() - started
    table = app.tables[0].name
    return Run(
        wall_s,
        processing_seconds(running.tables[table]),
        str(workspace.result_table(app.name, table)),
    )


def handwritten(
    workspace,
    results: DataFrame,
    available_now: bool = True,
    store: str = HANDWRITTEN_STATE_STORE,
):
    """A hand-written streaming DataFrame appending to a Delta table of its own.

    With `available_now` it runs over all its input and gives a `Run`; otherwise it keeps
    running and gives the `StreamingQuery`. `store` is the state store it keeps state in.
    """
    run = uuid.uuid4().hex[:8]
    table = str(workspace.tables_dir / "bench" / run)
    writer = (
        results.writeStream.outputMode("append")
        .foreachBatch(lambda batch, _: batch.write.format("delta").mode("append").save(table))
        .option("checkpointLocation", str(workspace.checkpoint("bench", run)))
    )
    return start_handwritten(writer, results.sparkSession, table, available_now, store)


def start_handwritten(
    writer: DataStreamWriter,
    spark: SparkSession,
    table: str,
    available_now: bool,
    store: str = HANDWRITTEN_STATE_STORE,
) -> Run | StreamingQuery:
    """Start a hand-written query writing `table`, keeping its state in `store`.

    With `available_now` it runs over all its input and gives a `Run`; otherwise it keeps
    running and gives the `StreamingQuery`.
    """
    from millrace.engine.session import state_store

    with state_store(spark, store):
        if not available_now:
            return writer.start()
        started = time.perf_counter()
        query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    return Run(time.perf_counter() - started, processing_seconds(query), table)


def ceiling(workspace, decoded: DataFrame, available_now: bool = True):
    """The input read from Kafka and its JSON decoded, then thrown away: no processing at all."""
    run = uuid.uuid4().hex[:8]
    writer = (
        decoded.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(workspace.checkpoint("bench", run)))
    )
    if not available_now:
        return writer.start()
    started = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    return Run(time.perf_counter() - started, processing_seconds(query), "noop")


def same_rows(spark: SparkSession, ours: str, theirs: str) -> None:
    """Stop the benchmark unless the two Delta tables hold the same rows, columns by name."""
    left = spark.read.format("delta").load(ours)
    right = spark.read.format("delta").load(theirs).select(*left.columns)
    missing, extra = right.exceptAll(left).count(), left.exceptAll(right).count()
    if missing or extra:
        raise SystemExit(
            f"results differ: millrace ({ours}) lacks {missing} rows of hand-written PySpark "
            f"({theirs}) and has {extra} rows it does not"
        )


def compare(
    spark: SparkSession,
    events: int,
    rounds: int,
    sides: dict[str, Callable[[], Run]],
    check: Callable[[SparkSession, str, str], None] = same_rows,
) -> dict[str, object]:
    """Events/s of every side over interleaved rounds, and each side's ratio to the baseline.

    The sides run in turn, one round after another, each round in another order, each run
    on a settled JVM (`_settle`).
    Throughput is events over the time spent in micro-batches; the wall-clock figures add
    starting (for millrace, compiling the app) and stopping the queries; events per CPU
    second (`cpu_ratio_of_medians`) count the CPU time of this process and Spark's JVM.
    `check` stops the benchmark unless every side but the ceiling agrees with
    `handwritten_pyspark`, in every round. Another side's ratio to the baseline is
    `<side>_ratio_of_medians`.
    """
    runs: dict[str, list[Run]] = {side: [] for side in sides}
    cpu_seconds: dict[str, list[float]] = {side: [] for side in sides}
    checked_sides = [name for name in sides if name not in (BASELINE, "ceiling")]
    # Warm-up rounds, not kept, warm the JVM's code and Spark's caches for every side.
    for _ in range(-(-WARMUP_RUNS // len(sides))):
        for side in sides.values():
            _settle(spark)
            side()
    order = random.Random(0)  # the same orders in every run of the benchmark
    for _ in range(rounds):
        # Each round in an order of its own, so that no side always runs right after the same
        # other side.
        for name in order.sample(list(sides), len(sides)):
            _settle(spark)
            cpu_before = _cpu_seconds(spark)
            runs[name].append(sides[name]())
            cpu_seconds[name].append(_cpu_seconds(spark) - cpu_before)
        for name in checked_sides:
            check(spark, runs[name][-1].output, runs[BASELINE][-1].output)
    result: dict[str, object] = {}
    for name, side_runs in runs.items():
        result[f"{name}_events_per_s"] = [events / run.processing_s for run in side_runs]
        result[f"{name}_wall_events_per_s"] = [events / run.wall_s for run in side_runs]
        result[f"{name}_events_per_cpu_s"] = [events / cpu for cpu in cpu_seconds[name]]
    medians = {name: statistics.median(result[f"{name}_events_per_s"]) for name in sides}
    result["ratio_of_medians"] = medians["millrace"] / medians[BASELINE]
    for name in checked_sides:
        if name != "millrace":
            result[f"{name}_ratio_of_medians"] = medians[name] / medians[BASELINE]
    wall_medians = {name: statistics.median(result[f"{name}_wall_events_per_s"]) for name in sides}
    result["wall_ratio_of_medians"] = wall_medians["millrace"] / wall_medians[BASELINE]
    cpu_medians = {name: statistics.median(result[f"{name}_events_per_cpu_s"]) for name in sides}
    result["cpu_ratio_of_medians"] = cpu_medians["millrace"] / cpu_medians[BASELINE]
    if "ceiling" in medians:
        result["ratio_to_ceiling"] = medians["millrace"] / medians["ceiling"]
    return result


def _cpu_seconds(spark: SparkSession) -> float:
    """The CPU time used so far by this process and by Spark's JVM, executors included.

    Events per CPU second is a second measure beside events/s: a run that waits for a core
    takes longer but uses no more CPU, so the two tell waiting from working. (On the 2-core
    machine, 2026-11-25, its rounds spread about as widely as those of events/s.)
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + cpu_seconds(spark_internals.driver_pid(spark))


def _settle(spark: SparkSession) -> None:
    """Unload every state store and collect the JVM's garbage, before a side's run.

    A stopped query's state stays loaded until Spark's maintenance task unloads it, up to a
    minute later: the memory store of an exactly-once side then holds its 1,000,000 ids on the
    heap that the next side runs on. Measured on 2026-11-25, the hand-written exactly-once
    query ran at 120,700 events/s right after the exactly-once app and at 134,800 right after
    the app on RocksDB, which keeps its state off the heap (medians of 6; 148,300 and 145,400
    when settled). Settled first, each side runs on a heap that holds none of another's
    state, as an app does that has its JVM to itself.
    """
    state = spark._jvm.org.apache.spark.sql.execution.streaming.state
    getattr(getattr(state, "StateStore$"), "MODULE$").unloadAll()
    spark._jvm.java.lang.System.gc()


def sustained(
    workspace,
    starters: dict[str, Callable[[str], Started]],
    payloads: Payloads,
    options,
    label: str,
) -> dict[str, object]:
    """The highest input rate each side sustains (`_load.search`), the sides' probes interleaved.

    `starters` start each side on a fresh stream; `options` carries the search's settings
    (`start_rate`, `refinements`, `warmup_seconds`, `probe_seconds`), as the benchmarks'
    command lines give them.
    """
    from millrace.bus.streams import create_stream, describe_stream

    def new_stream() -> str:
        stream = f"bench.live.{uuid.uuid4().hex[:8]}"
        create_stream(workspace.settings, stream, buckets=2)
        return stream

    def end_offsets(stream: str) -> dict[int, int]:
        info = describe_stream(workspace.settings, stream)
        return {bucket.bucket: bucket.end_offset for bucket in info.buckets}

    searches = {
        side: search(
            options.start_rate,
            options.refinements,
            lambda rate, start=start: probe(
                rate,
                start,
                new_stream,
                workspace.settings.bootstrap_servers,
                payloads,
                end_offsets,
                options.warmup_seconds,
                options.probe_seconds,
            ),
        )
        for side, start in starters.items()
    }
    probes: dict[str, list] = {side: [] for side in searches}
    while searches:
        for side, probes_left in list(searches.items()):
            result = next(probes_left, None)
            if result is None:
                del searches[side]
            else:
                print(f"{label} {side}: {result}", flush=True)
                probes[side].append(result)
    summary = {side: summarize(side_probes) for side, side_probes in probes.items()}
    theirs = summary[BASELINE]["max_sustained_rate"]
    ratios = {
        ("ratio" if side == "millrace" else f"{side}_ratio"): (
            summary[side]["max_sustained_rate"] / theirs if theirs else None
        )
        for side in summary
        if side.startswith("millrace")
    }
    return {**summary, **ratios}
