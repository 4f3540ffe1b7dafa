"""Processor apps next to the same per-key counter hand-written on PySpark's transformWithState.

Run it with `.venv/bin/python benchmarks/processors.py [--records N] [--keys K ...]
[--batch-records B] [--rounds R] [--only SIDE ...] [--notes TEXT]` after `make setup` (and
`bash benchmarks/setup_peers.sh` for the peers). For each key count K (1,000 and 100,000 by
default) it loads N records with K distinct keys into a Kafka stream of its own, then runs
the sides below over them R times, interleaved, each over all its input (trigger
available-now, at most B records a micro-batch, a fresh checkpoint and output stream each
time), after one round of each that warms the JVM up and is not kept:

- `millrace_stateful`: a millrace `Processor` counting in a `ValueState` with per-record
  Python logic (`on_record`), as `millrace.apps.processors.streaming` runs it, `exactly_once` (the
  default: each key remembers its records' ids to drop copies);
- `millrace_stateful_at_least_once`: the same processor with `semantics = "at_least_once"`,
  which remembers no ids: the difference is what input deduplication costs;
- `millrace_monoid`: the same count as a monoid processor (`zero`, `lift`, `combine`), which
  the runtime pre-aggregates per key and micro-batch before it touches state;
- `pyspark_transform_with_state`: the same logic written directly against PySpark's
  `groupBy(key).transformWithState` (Row API) with one `ValueState` per key, the records'
  JSON decoded in the JVM: the baseline the processor issue compares with;
- `spark_aggregation`: the same count as Spark's own streaming aggregation
  (`groupBy(key).count()` in update mode), the JSON decoded in the JVM: no Python runs per
  record or per key, so this is about the most any runtime on Spark's streaming engine can do
  with this input on this machine. `spark_aggregation_dedup` drops the copies of a record id
  first (`dropDuplicatesWithinWatermark`), the guarantee of the millrace sides' default
  `exactly_once`. Update mode emits each key's changed count every micro-batch; the side
  keeps the newest and writes them to the output stream when the input ends, after the
  processing time measured (the wall-clock figures include that write).

Every other side keeps its counts in state and emits each key's count once, on an event-time
timer that the watermark passes at the end of the input (the input ends with a record an hour
later than the rest), to a Kafka stream; each run's output is read back and checked against
a plain-Python count of the records (a mismatch stops the benchmark with SystemExit).

Records/s count the time the query spends in micro-batches, as Spark reports it (the sum of
`durationMs.triggerExecution`): the throughput of a running app. Records per CPU second
(`records_per_cpu_s`) count the CPU (user and system) that this process and every process
under it (Spark's JVM, its Python workers, a peer's processes) used in the side's run, from
/proc: its cost.
Wall-clock figures (`wall_*`), from start to stop, add starting and stopping the query. The
ratios are of the medians, each millrace side and each Spark aggregation over the PySpark
baseline, over Bytewax and over `spark_aggregation_dedup`
(`millrace_monoid_to_spark_dedup_ratio`: the monoid processor against Spark's own aggregation
with the same guarantee).
Loading the stream is not measured.

- `bytewax`: the same count in Bytewax (from PyPI; a dev dependency), single worker,
  in-memory state, reading the same topic with its Kafka connector, decoding each record's
  JSON in Python and counting with `fold_final`, which emits each key's count once at the
  end of the input, to a Kafka stream. Bytewax has no micro-batches: its records/s is from
  its wall-clock time, so compare it with the millrace sides' `wall` figures
  (`*_to_bytewax_wall_ratio`), which include starting and stopping the query.

Two peers give the millrace sides' guarantee (durable state, exactly-once), each run from a
virtualenv of its own that `bash benchmarks/setup_peers.sh` creates (their pins clash with the
project's), as a subprocess running a script of benchmarks/peers/ that reads the same topic
and writes each key's count once to a Kafka stream, checked like every side:

- `pyflink`: the counter in PyFlink's DataStream API (`KeyedProcessFunction`, `ValueState`
  on RocksDB through `EmbeddedRocksDBStateBackend`, an event-time timer per key, exactly-once
  checkpoints every 2 s and a transactional Kafka sink, parallelism 2, on Flink's local
  mini-cluster), its Kafka source bounded at the offsets the topic has when the job starts.
  Its processing time runs from the first record a task saw to the job's end (the last
  checkpoint's commit included; deploying the tasks and starting their Python workers, which
  Flink's own net run time counts, are not);
- `quix_streams`: the counter in Quix Streams with `processing_guarantee="exactly-once"`, a
  per-record Python reducer over RocksDB state in a tumbling window spanning all the records,
  emitted once per key by `final(closing_strategy="partition")` when the closing record
  passes (Quix Streams has no timers). The closing records open a window that never closes,
  so this side's output is checked against the counts without the closing key. Its processing
  time runs from its first record to its stop.

Both peers' wall-clock figures include starting their interpreter (and Flink's JVM). Each
side's `*_to_fastest_peer_ratio` is its median over the faster peer's median (`fastest_peer`
names it, by records/s; `*_to_fastest_peer_wall_ratio` compares wall-clock figures), and the
peers' versions and settings go to the result's `peers`.

The result goes to benchmarks/results/processors-*.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from _harness import Run, isolated_workspace, processing_seconds, write_results
from _peers import FLINK_KAFKA_CONNECTOR, PEERS, run_peer
from confluent_kafka import Producer
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from millrace.config.proc_stat import cpu_used_between, process_tree

START_MS = 1_767_225_600_000
RECORDS_PER_S = 10_000
"""Event-time rate of the generated records: N records span N / RECORDS_PER_S seconds."""
LATENESS_MS = 30_000
CLOSING_KEY = "closing"
RECORDS = 400_000
"""The default number of records loaded for each key count."""
BATCH_RECORDS = 100_000
"""The default cap on the records of a micro-batch."""
PARTITIONS = 2
SIDES = (
    "millrace_stateful",
    "millrace_stateful_at_least_once",
    "millrace_monoid",
    "pyspark_transform_with_state",
    "spark_aggregation",
    "spark_aggregation_dedup",
    "bytewax",
    "pyflink",
    "quix_streams",
)
PEER_IDLE_TIMEOUT_S = 120
"""Quix Streams stops after this long without a record if it has not seen every key's count."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument(
        "--keys", type=int, action="append", help="distinct keys (repeatable; 1000 and 100000)"
    )
    parser.add_argument("--batch-records", type=int, default=BATCH_RECORDS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", action="append", choices=SIDES, help="run this side")
    parser.add_argument("--notes", help="what to know about this run, kept in the result")
    options = parser.parse_args()
    key_counts = options.keys or [1_000, 100_000]
    sides = [side for side in SIDES if not options.only or side in options.only]
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        spark = spark_session(workspace.settings, app_name="millrace-bench-processors")
        peers: dict[str, object] = {}
        results: dict[str, object] = {
            "records": options.records,
            "batch_records": options.batch_records,
            "rounds": options.rounds,
            "spark": {
                "master": workspace.settings.spark_master,
                "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
                "state_store": spark.conf.get("spark.sql.streaming.stateStore.providerClass"),
            },
            "peers": peers,
        }
        if options.notes:
            results["notes"] = options.notes
        try:
            for keys in key_counts:
                load = _load(workspace, options.records, keys)
                runners = _runners(spark, workspace, load, options.batch_records, peers)
                results[_workload(keys, options.records, options.batch_records)] = {
                    "keys": keys,
                    **_compare(
                        spark,
                        workspace,
                        load,
                        options.rounds,
                        {side: runners[side] for side in sides},
                    ),
                }
        finally:
            stop_spark_session()
    write_results("processors", results)


def _workload(keys: int, records: int, batch_records: int) -> str:
    """The result's name for a key count: another input size or micro-batches of another size
    are another workload, so that `benchmarks/render.py` shows them beside the default ones,
    not instead of them."""
    name = f"keys_{keys}"
    if records != RECORDS:
        name += f"_records_{records}"
    if batch_records != BATCH_RECORDS:
        name += f"_batch_records_{batch_records}"
    return name


def _runners(
    spark: SparkSession, workspace, load: _Load, batch_records: int, peers: dict[str, object]
) -> dict[str, Callable[[], Run]]:
    """Each side's run over `load`, by side; the peers record their settings in `peers`."""
    return {
        "millrace_stateful": lambda: _millrace(spark, workspace, load, _counter, batch_records),
        "millrace_stateful_at_least_once": lambda: _millrace(
            spark, workspace, load, partial(_counter, semantics="at_least_once"), batch_records
        ),
        "millrace_monoid": lambda: _millrace(
            spark, workspace, load, _monoid_counter, batch_records
        ),
        "pyspark_transform_with_state": lambda: _pyspark(spark, workspace, load, batch_records),
        "spark_aggregation": lambda: _spark_aggregation(
            spark, workspace, load, batch_records, deduplicate=False
        ),
        "spark_aggregation_dedup": lambda: _spark_aggregation(
            spark, workspace, load, batch_records, deduplicate=True
        ),
        "bytewax": lambda: _bytewax(workspace, load),
        "pyflink": lambda: _peer(workspace, load, "pyflink", peers),
        "quix_streams": lambda: _peer(workspace, load, "quix_streams", peers),
    }


@dataclass(frozen=True)
class _Load:
    """A loaded input stream: its name, records, the time every timer is set at, the counts."""

    stream: str
    records: int
    emit_ms: int
    counts: Counter


def _compare(
    spark: SparkSession,
    workspace,
    load: _Load,
    rounds: int,
    sides: dict[str, Callable[[], Run]],
) -> dict[str, object]:
    """Records/s of every side over interleaved rounds, and each millrace side's ratio."""
    runs: dict[str, list[Run]] = {side: [] for side in sides}
    cpu_s: dict[str, list[float]] = {side: [] for side in sides}
    for round_number in range(rounds + 1):
        for side, run_side in sides.items():
            before = process_tree(os.getpid())
            run = _retrying(side, run_side)
            used_s = cpu_used_between(before, process_tree(os.getpid()))
            _check(spark, workspace, _expected(load, side), side, run.output)
            # The first round warms the JVM's code and Spark's caches for every side.
            if round_number > 0:
                runs[side].append(run)
                cpu_s[side].append(used_s)
            print(f"{side}: {load.records / run.processing_s:,.0f} records/s", flush=True)
    result: dict[str, object] = {}
    for side, side_runs in runs.items():
        result[f"{side}_records_per_s"] = [load.records / run.processing_s for run in side_runs]
        result[f"{side}_wall_records_per_s"] = [load.records / run.wall_s for run in side_runs]
        result[f"{side}_records_per_cpu_s"] = [load.records / s for s in cpu_s[side]]
    baselines = (
        ("pyspark_transform_with_state", "pyspark"),
        ("bytewax", "bytewax"),
        ("spark_aggregation_dedup", "spark_dedup"),
    )
    for baseline, short in baselines:
        if baseline not in runs:
            continue
        for side in runs:
            if side == baseline or not side.startswith(("millrace_", "spark_aggregation")):
                continue
            for figure in ("records_per_s", "wall_records_per_s"):
                ratio = statistics.median(result[f"{side}_{figure}"]) / statistics.median(
                    result[f"{baseline}_{figure}"]
                )
                name = "ratio" if figure == "records_per_s" else "wall_ratio"
                result[f"{side}_to_{short}_{name}"] = ratio
    result.update(_to_fastest_peer(result, runs))
    return result


def _to_fastest_peer(result: dict[str, Any], runs: dict[str, list[Run]]) -> dict[str, object]:
    """Each millrace side's medians over those of the peer with the higher median records/s."""
    ran = [peer for peer in PEERS if peer in runs]
    if not ran:
        return {}
    fastest = max(ran, key=lambda peer: statistics.median(result[f"{peer}_records_per_s"]))
    ratios: dict[str, object] = {"fastest_peer": fastest}
    for side in runs:
        if side.startswith("millrace_"):
            for figure, name in (("records_per_s", "ratio"), ("wall_records_per_s", "wall_ratio")):
                ratios[f"{side}_to_fastest_peer_{name}"] = statistics.median(
                    result[f"{side}_{figure}"]
                ) / statistics.median(result[f"{fastest}_{figure}"])
    return ratios


def _retrying(side: str, run_side: Callable[[], Run], attempts: int = 3) -> Run:
    """`run_side()`, run again when Spark gave up on starting a Python worker.

    On a loaded machine a Python worker of transformWithState may start after the JVM's
    fixed wait for it has passed ("Python worker failed to connect back"), which fails the
    query; that says nothing about the side's speed, so the run is done again from the start.
    """
    for attempt in range(1, attempts + 1):
        try:
            return run_side()
        except Exception as error:
            if "failed to connect back" not in str(error) or attempt == attempts:
                raise
            print(f"{side}: a Python worker did not start in time, running again", flush=True)
    raise AssertionError("unreachable")


def _expected(load: _Load, side: str) -> Counter:
    """The counts `side` must write: Quix Streams' closing window never closes (see above)."""
    if side == "quix_streams":
        return Counter({key: n for key, n in load.counts.items() if key != CLOSING_KEY})
    return load.counts


def _check(spark: SparkSession, workspace, counts: Counter, side: str, output: str) -> None:
    """Stop the benchmark unless `output` holds exactly one right count per key."""
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", output)
        .load()
        # Watermark markers (empty values, `millrace.bus.markers`) are no counts.
        .where(F.length("value") > 0)
        .select(F.from_json(F.col("value").cast("string"), "key STRING, count LONG").alias("c"))
        .select("c.*")
        .collect()
    )
    produced = {row["key"]: row["count"] for row in rows}
    if len(rows) != len(produced) or produced != dict(counts):
        missing = set(counts) - set(produced)
        wrong = {key for key in produced if produced[key] != counts.get(key)}
        raise SystemExit(
            f"{side} produced {len(rows)} counts for {len(produced)} keys, expected "
            f"{len(counts)}: {len(missing)} keys missing, {len(wrong)} keys wrong"
        )


def _counter(stream: str, output: str, emit_ms: int, semantics: str = "exactly_once") -> type:
    """A stateful millrace processor: a count per key, emitted when the watermark passes."""
    from millrace import Input, Processor, ValueState

    chosen = semantics

    class Counter(Processor):
        name = f"bench_counter_{uuid.uuid4().hex[:8]}"
        semantics = chosen
        inputs = [Input(stream, key="key", time="time", lateness=f"{LATENESS_MS}ms")]  # noqa: RUF012
        count = ValueState(int)

        def on_record(self, key, record, ctx):
            if not self.count.exists():
                ctx.set_timer("emit", event_time_ms=emit_ms)
            self.count.set(self.count.get(0) + 1)

        def on_timer(self, key, timer, ctx):
            ctx.produce(output, {"key": key, "count": self.count.get()})

    return Counter


def _monoid_counter(stream: str, output: str, emit_ms: int) -> type:
    """The same count as a monoid processor: the runtime folds each key's batch first."""
    from millrace import Input, Processor

    class MonoidCounter(Processor):
        name = f"bench_monoid_counter_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream, key="key", time="time", lateness=f"{LATENESS_MS}ms")]  # noqa: RUF012
        zero = 0

        def lift(self, record):
            return 1

        def combine(self, a, b):
            return a + b

        def on_aggregate(self, key, aggregate, ctx):
            if ctx.timer("emit") is None:
                ctx.set_timer("emit", event_time_ms=emit_ms)

        def on_timer(self, key, timer, ctx):
            ctx.produce(output, {"key": key, "count": self.aggregate.get()})

    return MonoidCounter


def _millrace(
    spark: SparkSession,
    workspace,
    load: _Load,
    processor: Callable[[str, str, int], type],
    batch_records: int,
) -> Run:
    from millrace.apps.processors.streaming import start_processor_app

    output = _output_stream(workspace)
    started = time.perf_counter()
    running = start_processor_app(
        spark,
        workspace,
        processor(load.stream, output, load.emit_ms),
        available_now=True,
        max_records_per_batch=batch_records,
    )
    running.await_termination()
    return Run(time.perf_counter() - started, processing_seconds(running.query), output)


class DirectCounter(StatefulProcessor):
    """The per-key counter written directly against transformWithState: one group per key."""

    def __init__(self, emit_ms: int) -> None:
        self.emit_ms = emit_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "count LONG")

    def handleInputRows(  # noqa: N802 - Spark's callback names
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        seen = self.count.exists()
        count = self.count.get()[0] if seen else 0
        for _ in rows:
            count += 1
        if not seen:
            self.handle.registerTimer(self.emit_ms)
        self.count.update((count,))
        return iter(())

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        yield Row(key=key[0], count=self.count.get()[0])

    def close(self) -> None:
        pass


def direct_counts(raw: DataFrame, emit_ms: int, lateness_ms: int) -> DataFrame:
    """The count per key of the records of Kafka frame `raw`, on `transformWithState` with
    `DirectCounter`: each key's count as a JSON `value`, once the watermark passes `emit_ms`."""
    records = (
        raw.select(F.from_json(F.col("value").cast("string"), "time LONG, key STRING").alias("r"))
        .select(F.col("r.key").alias("key"), F.timestamp_millis("r.time").alias("event_time"))
        .withWatermark("event_time", f"{lateness_ms} milliseconds")
        .drop("event_time")
    )
    counts = records.groupBy("key").transformWithState(
        statefulProcessor=DirectCounter(emit_ms),
        outputStructType="key STRING, count LONG",
        outputMode="Append",
        timeMode="EventTime",
    )
    return counts.select(F.to_json(F.struct("key", "count")).alias("value"))


def _kafka_input(
    spark: SparkSession, workspace, load: _Load, batch_records: int, *, headers: bool
) -> DataFrame:
    """The load's stream read by Spark, from the start, `batch_records` a micro-batch."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", load.stream)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", str(headers).lower())
        .option("maxOffsetsPerTrigger", batch_records)
        .load()
    )


def _pyspark(spark: SparkSession, workspace, load: _Load, batch_records: int) -> Run:
    output = _output_stream(workspace)
    raw = _kafka_input(spark, workspace, load, batch_records, headers=False)
    run = uuid.uuid4().hex[:8]
    started = time.perf_counter()
    query = (
        direct_counts(raw, load.emit_ms, LATENESS_MS)
        .writeStream.foreachBatch(
            lambda batch, _: (
                batch.write.format("kafka")
                .mode("append")
                .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
                .option("topic", output)
                .save()
            )
        )
        .option("checkpointLocation", str(workspace.checkpoint("bench", run)))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return Run(time.perf_counter() - started, processing_seconds(query), output)


def _spark_aggregation(
    spark: SparkSession, workspace, load: _Load, batch_records: int, *, deduplicate: bool
) -> Run:
    """The count as Spark's streaming aggregation, in the JVM; the newest counts written last."""
    output = _output_stream(workspace)
    raw = _kafka_input(spark, workspace, load, batch_records, headers=True)
    ids = F.filter("headers", lambda header: header.getField("key") == F.lit("id"))
    records = raw.select(
        F.from_json(F.col("value").cast("string"), "time LONG, key STRING").alias("r"),
        F.try_element_at(ids, F.lit(1)).getField("value").cast("string").alias("record_id"),
    ).select(
        F.col("r.key").alias("key"),
        F.timestamp_millis("r.time").alias("event_time"),
        "record_id",
    )
    records = records.withWatermark("event_time", f"{LATENESS_MS} milliseconds")
    if deduplicate:
        records = records.dropDuplicatesWithinWatermark(["record_id"])
    newest: dict[str, int] = {}

    def keep(batch, _) -> None:
        newest.update((row["key"], row["count"]) for row in batch.collect())

    run = uuid.uuid4().hex[:8]
    started = time.perf_counter()
    query = (
        records.groupBy("key")
        .count()
        .writeStream.outputMode("update")
        .foreachBatch(keep)
        .option("checkpointLocation", str(workspace.checkpoint("bench", run)))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    producer = Producer({"bootstrap.servers": workspace.settings.bootstrap_servers})
    for key, count in newest.items():
        _produce(producer, output, {"key": key, "count": count}, f"bench:count:{key}")
    producer.flush()
    return Run(time.perf_counter() - started, processing_seconds(query), output)


def _bytewax(workspace, load: _Load) -> Run:
    """The count in Bytewax: one worker, in-memory state, the same records from Kafka.

    Each record's JSON is decoded in Python and counted by `fold_final`, which emits each
    key's count when the input ends (the source reads to the end of the topic and stops).
    Bytewax has no micro-batches, so its processing time is its wall-clock time.
    """
    import bytewax.operators as op
    from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
    from bytewax.dataflow import Dataflow
    from bytewax.testing import run_main

    output = _output_stream(workspace)
    brokers = [workspace.settings.bootstrap_servers]
    flow = Dataflow(f"bench-{uuid.uuid4().hex[:8]}")
    messages = op.input("read", flow, KafkaSource(brokers, [load.stream], tail=False))

    def keyed(message: Any) -> tuple[str, dict[str, Any]]:
        record = json.loads(message.value)
        return record["key"], record

    counts = op.fold_final(
        "count", op.map("decode", messages, keyed), lambda: 0, lambda count, _: count + 1
    )
    encoded = op.map(
        "encode",
        counts,
        lambda pair: KafkaSinkMessage(
            pair[0].encode(), json.dumps({"key": pair[0], "count": pair[1]}).encode()
        ),
    )
    op.output("write", encoded, KafkaSink(brokers, output))
    started = time.perf_counter()
    run_main(flow)
    wall_s = time.perf_counter() - started
    return Run(wall_s, wall_s, output)


def _peer(workspace, load: _Load, peer: str, peers: dict[str, object]) -> Run:
    """The count in a peer, run by its counter script (`_peers`); its settings to `peers`."""
    output = _output_stream(workspace)
    settings = {
        "bootstrap_servers": workspace.settings.bootstrap_servers,
        "input": load.stream,
        "output": output,
        "emit_ms": load.emit_ms,
        "start_ms": START_MS,
        "lateness_ms": LATENESS_MS,
        "keys": len(_expected(load, peer)),
        "connector": FLINK_KAFKA_CONNECTOR,
        "idle_timeout_s": PEER_IDLE_TIMEOUT_S,
    }
    wall_s, report = run_peer(peer, "counter", settings)
    peers[peer] = report["settings"]
    return Run(wall_s, report["processing_s"], output)


def _output_stream(workspace) -> str:
    from millrace.bus.streams import create_stream

    output = f"bench.counts.{uuid.uuid4().hex[:8]}"
    create_stream(workspace.settings, output, buckets=2)
    return output


def _load(workspace, count: int, keys: int) -> _Load:
    """`count` records over `keys` keys, then the closing record, and their plain counts."""
    from millrace.bus.streams import create_stream

    stream = f"bench.records.{keys}"
    create_stream(workspace.settings, stream, buckets=PARTITIONS)
    producer = Producer(
        {
            "bootstrap.servers": workspace.settings.bootstrap_servers,
            "linger.ms": 20,
            "compression.type": "lz4",
            "enable.idempotence": True,
        }
    )
    generator = random.Random(keys)
    counts: Counter = Counter()
    emit_ms = START_MS + count * 1000 // RECORDS_PER_S + 10_000
    records = (
        {
            "time": START_MS + number * 1000 // RECORDS_PER_S + generator.randrange(-2000, 2000),
            "key": f"k{generator.randrange(keys)}",
        }
        for number in range(count)
    )
    for number, record in enumerate(records):
        counts[record["key"]] += 1
        _produce(producer, stream, record, f"bench:{keys}:{number}")
    # A closing record in every partition, so that the micro-batch that reads the last records
    # reads it too, and its watermark passes every key's timer, its own included.
    closing = {"time": emit_ms + LATENESS_MS + 3_600_000, "key": CLOSING_KEY}
    for partition in range(PARTITIONS):
        counts[CLOSING_KEY] += 1
        _produce(producer, stream, closing, f"bench:{keys}:closing:{partition}", partition)
    producer.flush()
    return _Load(stream, count + PARTITIONS, emit_ms, counts)


def _produce(
    producer: Producer,
    stream: str,
    record: dict[str, Any],
    record_id: str,
    partition: int | None = None,
) -> None:
    placement = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(
                stream,
                json.dumps(record).encode(),
                key=record["key"].encode(),
                headers={"id": record_id},
                **placement,
            )
            return
        except BufferError:
            producer.poll(0.1)


if __name__ == "__main__":
    main()
