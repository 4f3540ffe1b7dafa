"""MillWheel's latency experiment (section 8.1): one keyed stage at a fixed input rate.

Run it with `.venv/bin/python benchmarks/latency.py [--rate R | --fraction F] [--seconds S]
[--warmup-seconds W] [--only SIDE ...]` after `make setup`. A publisher process writes R
records a second, each stamped with the wall-clock time it was made, to a fresh stream; the
stage under test passes each record on, keyed, to an output stream; a consumer in this process
reads the output as it arrives. A record's latency is the time it was read minus the time it
was stamped: publish, the stage and the output write, end to end. Records stamped in the first
W seconds are left out (start-up and the first micro-batches).

Sides, run one after the other in the same sitting:

- `millrace_processor`: a millrace `Processor` keyed by the record's key that produces each
  record it gets (`ctx.produce`), as `millrace.runtime.processors` runs it, default trigger;
- `pyspark_default`: the same pass-through hand-written in PySpark, Kafka to Kafka, with the
  default trigger (micro-batches as fast as they go);
- `pyspark_real_time`: the same query with Spark's real-time mode trigger, the fastest
  trigger a stateless Kafka-to-Kafka query supports; when this Spark refuses it, the result
  says why.

The rate is R records a second (default 2,000, well below the stage's limit on a 2-core
machine), or, with `--fraction F`, F times the highest rate the millrace stage sustains (the
papers' maximum sustainable throughput). A sustained-rate search (`_load.search`, with
`--start-rate`, `--refinements`, `--probe-seconds`) first finds that rate for the millrace
stage and for the PySpark pass-through with the default trigger, their probes interleaved;
then every side's latency is measured at that one rate, so the sides carry the same load. The
result goes to benchmarks/results/latency-*.json, with the median, p95 and p99, the
percentiles from 1 to 99 for the plot, and with `--fraction` the search's probes and rates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable

from _harness import isolated_workspace, write_results
from _load import publish_at_rate
from _sides import Started, sustained
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

KEYS = 1_000
_QUIET_S = 15
"""Once the publisher is done, the output is read until no record came for this long."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--rate", type=int, default=2_000)
    load.add_argument("--fraction", type=float, metavar="F")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup-seconds", type=float, default=20)
    parser.add_argument("--only", action="append", metavar="SIDE")
    parser.add_argument("--probe-seconds", type=float, default=60)
    parser.add_argument("--start-rate", type=int, default=2_000)
    parser.add_argument("--refinements", type=int, default=2)
    options = parser.parse_args()
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        spark = spark_session(workspace.settings, app_name="millrace-bench-latency")
        sides: dict[str, Callable[[str, str], Started]] = {
            "millrace_processor": lambda source, out: _millrace(spark, workspace, source, out),
            "pyspark_default": lambda source, out: _pyspark(spark, workspace, source, out),
            "pyspark_real_time": lambda source, out: _pyspark(
                spark, workspace, source, out, real_time=True
            ),
        }
        results: dict[str, object] = {
            "seconds": options.seconds,
            "warmup_seconds": options.warmup_seconds,
        }
        try:
            if options.fraction is not None:
                search = _sustained(workspace, sides, options)
                results["sustained"] = search
                highest = search["millrace_processor"]["max_sustained_rate"]
                if not highest:
                    raise SystemExit(
                        f"the millrace stage sustained no rate from {options.start_rate} "
                        "records/s on: give a lower --start-rate"
                    )
                options.rate = int(options.fraction * highest)
                results["fraction"] = options.fraction
            results["rate"] = options.rate
            for name, start in sides.items():
                if options.only and name not in options.only:
                    continue
                results[name] = _measure(workspace, start, options)
                print(f"{name}: {results[name]}", flush=True)
        finally:
            stop_spark_session()
    write_results("latency", results)


def _sustained(workspace, sides: dict[str, Callable[[str, str], Started]], options) -> dict:
    """The highest rate the millrace stage and the default-trigger PySpark stage sustain."""
    from millrace.bus.streams import create_stream

    def relaying(side: str) -> Callable[[str], Started]:
        def start(stream: str) -> Started:
            create_stream(workspace.settings, f"{stream}.out", buckets=2)
            return sides[side](stream, f"{stream}.out")

        return start

    search = sustained(
        workspace,
        {
            "millrace_processor": relaying("millrace_processor"),
            "handwritten_pyspark": relaying("pyspark_default"),
        },
        stamped_records,
        options,
        label="latency",
    )
    search["pyspark_default"] = search.pop("handwritten_pyspark")
    return search


def _measure(workspace, start: Callable[[str, str], Started], options) -> dict:
    """Latencies of one side: start it, feed it at the rate, read its output as it comes."""
    from millrace.bus.streams import create_stream

    run = uuid.uuid4().hex[:8]
    source, output = f"bench.latency.{run}", f"bench.latency.{run}.out"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, output, buckets=2)
    try:
        started = start(source, output)
    except Exception as error:  # a refused trigger is a result, not a crash
        return {"unsupported": str(error).strip().splitlines()[0]}
    latencies: list[float] = []
    published = threading.Event()
    reader = threading.Thread(
        target=_read_latencies,
        args=(workspace.settings.bootstrap_servers, output, options, published, latencies),
        daemon=True,
    )
    reader.start()
    publisher = publish_at_rate(
        workspace.settings.bootstrap_servers,
        source,
        options.rate,
        options.warmup_seconds + options.seconds,
        stamped_records,
    )
    publisher.join()
    published.set()
    reader.join()
    started.stop()
    if not latencies:
        return {"records": 0}
    ranked = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "records": len(latencies),
        "median_ms": statistics.median(latencies),
        "p95_ms": ranked[94],
        "p99_ms": ranked[98],
        "percentiles_ms": ranked,
    }


def _read_latencies(
    bootstrap_servers: str,
    stream: str,
    options,
    published: threading.Event,
    latencies: list[float],
) -> None:
    """Read `stream` until the output goes quiet after `published`; latencies after warm-up."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"latency-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(stream, bucket, 0) for bucket in range(2)])
    started_ms = time.time() * 1000
    measured_from_ms = started_ms + options.warmup_seconds * 1000
    last_seen = time.monotonic()
    try:
        # The stage may lag behind the publisher: read on until nothing came for a while.
        while not published.is_set() or time.monotonic() - last_seen < _QUIET_S:
            messages = consumer.consume(10_000, timeout=0.2)
            if messages:
                last_seen = time.monotonic()
            for message in messages:
                if message.error():
                    continue
                received_ms = time.time() * 1000
                sent_ms = json.loads(message.value())["sent_ms"]
                if sent_ms >= measured_from_ms:
                    latencies.append(received_ms - sent_ms)
    finally:
        consumer.close()


def stamped_records(first: int, count: int) -> list[bytes]:
    """`count` records stamped with the current time, for the fixed-rate publisher."""
    now_ms = int(time.time() * 1000)
    keys = ((first + offset) % KEYS for offset in range(count))
    return [f'{{"time":{now_ms},"key":"k{key}"}}'.encode() for key in keys]


def _millrace(spark: SparkSession, workspace, source: str, output: str) -> Started:
    from millrace import Input, Processor
    from millrace.runtime.processors import start_processor_app

    class Relay(Processor):
        name = f"bench_relay_{uuid.uuid4().hex[:8]}"
        inputs = [Input(source, key="key", time="time", lateness="1s")]  # noqa: RUF012

        def on_record(self, key, record, ctx):
            ctx.produce(output, {"key": key, "sent_ms": ctx.event_time_ms}, key=key)

    running = start_processor_app(spark, workspace, Relay, available_now=False)
    return Started([running.query], source, running.stop)


def _pyspark(
    spark: SparkSession, workspace, source: str, output: str, real_time: bool = False
) -> Started:
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    record = F.from_json(F.col("value").cast("string"), "time BIGINT, key STRING")
    relayed = raw.select(record.alias("r")).select(
        F.col("r.key").alias("key"),
        F.to_json(F.struct(F.col("r.key").alias("key"), F.col("r.time").alias("sent_ms"))).alias(
            "value"
        ),
    )
    writer = (
        relayed.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", str(workspace.checkpoint("bench", uuid.uuid4().hex[:8])))
    )
    if real_time:
        writer = writer.trigger(realTime="5 minutes").outputMode("update")
    return Started([writer.start()], source)


if __name__ == "__main__":
    main()
