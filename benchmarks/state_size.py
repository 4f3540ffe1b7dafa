"""A processor's micro-batch beside many keys stored: does its cost grow with the state kept?

Run it with `.venv/bin/python benchmarks/state_size.py [--stored K ...] [--touched-keys T]
[--batch-records B] [--batches N] [--notes TEXT]` after `make setup`. For each K (10,000 and
1,000,000 by default) a millrace `Processor` counting records per key in a `ValueState`
(`exactly_once`, the default) runs, in this script's Spark session, over a stream of its own:

1. the store: K records, one for each of K keys, run to their end (`--available-now`,
   micro-batches of at most `STORE_BATCH_RECORDS`);
2. the measure: N micro-batches of B records over T of those keys (default 5 of 10,000 over
   1,000), run to their end from the same checkpoint, at most B records a micro-batch.

The figure of a K is the median of the measure's micro-batches' `triggerExecution` (Spark's
own duration of each); `stored_ratio` is the figure at the largest K over the figure at the
smallest, after a run at the smallest K that warms the JVM up and is not kept. Issue 46
(item 3) asks at most 1.5 at 1,000,000 keys against 10,000: a micro-batch should cost what
its records and the keys they touch cost, not the keys stored. Each run's records read, as
Spark counts them, are checked against the records published.

The result goes to benchmarks/results/state-size-*.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from _harness import isolated_workspace, write_results
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

STORE_BATCH_RECORDS = 200_000
BUCKETS = 2
START_MS = 1_767_225_600_000
"""The records' event times start here and go up a millisecond a record: none is late."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, action="append", help="keys stored (repeatable)")
    parser.add_argument("--touched-keys", type=int, default=1_000)
    parser.add_argument("--batch-records", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--notes", help="what to know about this run, kept in the result")
    options = parser.parse_args()
    stored_counts = sorted(options.stored or [10_000, 1_000_000])
    results: dict[str, object] = {
        "touched_keys": options.touched_keys,
        "batch_records": options.batch_records,
        "batches": options.batches,
    }
    if options.notes:
        results["notes"] = options.notes
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        spark = spark_session(workspace.settings, app_name="millrace-bench-state-size")
        try:
            # A first run, not kept, warms the JVM's code and Spark's caches.
            _measure(spark, workspace, stored_counts[0], options)
            medians = {}
            sides: dict[str, object] = {}
            for stored in stored_counts:
                seconds = _measure(spark, workspace, stored, options)
                medians[stored] = statistics.median(seconds)
                sides[f"keys_stored_{stored}"] = {
                    "batch_s": seconds,
                    "median_batch_s": medians[stored],
                }
                print(f"{stored:,} keys stored: {medians[stored]:.3f} s a micro-batch", flush=True)
        finally:
            stop_spark_session()
    results["micro_batches"] = sides
    if len(medians) > 1:
        results["stored_ratio"] = medians[stored_counts[-1]] / medians[stored_counts[0]]
    write_results("state-size", results)


def _measure(
    spark: SparkSession, workspace, stored: int, options: argparse.Namespace
) -> list[float]:
    """Store `stored` keys, then run the measure's micro-batches: their seconds each."""
    from millrace.bus.streams import create_stream

    stream = f"bench.state-size.{stored}.{uuid.uuid4().hex[:8]}"
    create_stream(workspace.settings, stream, buckets=BUCKETS)
    counter = _counter(stream)
    _run(spark, workspace, counter, stream, range(stored), stored, STORE_BATCH_RECORDS)
    measured = range(stored, stored + options.batches * options.batch_records)
    progress = _run(
        spark, workspace, counter, stream, measured, options.touched_keys, options.batch_records
    )
    return [batch["durationMs"]["triggerExecution"] / 1000 for batch in progress]


def _run(
    spark: SparkSession,
    workspace,
    counter: type,
    stream: str,
    numbers: range,
    keys: int,
    batch_records: int,
) -> list[dict]:
    """Publish records `numbers` over `keys` keys to `stream` and run `counter` to their end,
    at most `batch_records` a micro-batch: the progress of each micro-batch that read some."""
    from millrace.apps.processors.streaming import start_processor_app

    _publish(spark, workspace, stream, numbers, keys)
    started = time.perf_counter()
    running = start_processor_app(
        spark, workspace, counter, available_now=True, max_records_per_batch=batch_records
    )
    running.await_termination()
    progress = [batch for batch in running.query.recentProgress if _read(batch, stream)]
    read = sum(_read(batch, stream) for batch in progress)
    if read != len(numbers):
        raise SystemExit(f"{stream}: read {read} records of {len(numbers)}")
    print(f"  {len(numbers):,} records in {time.perf_counter() - started:.1f} s", flush=True)
    return progress


def _read(progress: dict, stream: str) -> int:
    """The records a micro-batch read from `stream` (the processor has other sources)."""
    sources = progress["sources"]
    return sum(source["numInputRows"] for source in sources if stream in source["description"])


def _publish(spark: SparkSession, workspace, stream: str, numbers: range, keys: int) -> None:
    """Records `numbers`, record n for key `k<n mod keys>`, a millisecond apart."""
    from millrace.engine.writes import write_batch

    number = F.col("id")
    records = spark.range(numbers.start, numbers.stop, 1, numPartitions=4).select(
        (F.lit(START_MS) + number).alias("time"),
        F.concat(F.lit("k"), (number % keys).cast("string")).alias("key"),
        F.concat(F.lit(f"{stream}:"), number.cast("string")).alias("record_id"),
    )
    write_batch(records, workspace, stream)


def _counter(stream: str) -> type:
    """A stateful millrace processor: a count per key, kept and never emitted."""
    from millrace import Input, Processor, ValueState

    class Counter(Processor):
        name = f"bench_state_size_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream, key="key", time="time", lateness="1s")]  # noqa: RUF012
        count = ValueState(int)

        def on_record(self, key, record, ctx):
            self.count.set(self.count.get(0) + 1)

    return Counter


if __name__ == "__main__":
    main()
