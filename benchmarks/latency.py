"""MillWheel's latency experiment (section 8.1): one keyed stage at a fixed input rate.

Run it with `.venv/bin/python benchmarks/latency.py [--rate R | --fraction F] [--seconds S]
[--warmup-seconds W] [--only SIDE ...] [--peer-commit-ms C] [--notes TEXT]` after `make setup`
(and `bash benchmarks/setup_peers.sh` for the peers). A publisher process writes R records a
second, each stamped with the wall-clock time it was made and numbered, to a fresh stream;
the stage under test passes each record on, keyed, to an output stream; a consumer in this
process reads the output as it arrives (committed records only, as a consumer of Kafka
transactions does). A record's latency is the time it was read minus the time it was stamped:
publish, the stage and the output write, end to end. Records stamped in the first W seconds
are left out (start-up and the first micro-batches). Each side's output is checked: every
record published comes out once, by its number (a mismatch stops the benchmark with
SystemExit).

Sides, run one after the other in the same sitting:

- `millrace_processor`: a millrace `Processor` keyed by the record's key that produces each
  record it gets (`ctx.produce`), as `millrace.apps.processors.streaming` runs it, default trigger;
- `millrace_processor_deployed`: the same processor deployed (`millrace deploy`, in the
  workspace's host, default trigger), as users run it; its micro-batches come from the
  metrics stream (`millrace.monitor.metrics_log`);
- `pyspark_default`: the same pass-through hand-written in PySpark, Kafka to Kafka, with the
  default trigger (micro-batches as fast as they go);
- `pyspark_real_time`: the same query with Spark's real-time mode trigger, the fastest
  trigger a stateless Kafka-to-Kafka query supports; when this Spark refuses it, the result
  says why;
- `pyflink` and `quix_streams`: the peers of `benchmarks/processors.py`, with the guarantee
  millrace gives (exactly-once), each run from its own virtualenv by a script of
  benchmarks/peers/ (`_peers`): PyFlink keys each record with `key_by` (parallelism 2) and
  writes through Kafka transactions that its exactly-once checkpoints commit every C
  milliseconds (`--peer-commit-ms`, default 1,000); Quix Streams keys each record with
  `group_by` (through a repartition topic) and commits its transactions every C
  milliseconds. A record of theirs is read once its transaction commits, so C bounds their
  latency from below; the peers' versions and settings go to the result's `peers`.

The rate is R records a second (default 2,000, well below the stage's limit on a 2-core
machine), or, with `--fraction F`, F times the highest rate the millrace stage sustains (the
papers' maximum sustainable throughput). A sustained-rate search (`_load.search`, with
`--start-rate`, `--refinements`, `--probe-seconds`) first finds that rate for the millrace
stage and for the PySpark pass-through with the default trigger, their probes interleaved;
then every side's latency is measured at that one rate, so the sides carry the same load. The
result goes to benchmarks/results/latency-*.json, with the median, p95 and p99, the
percentiles from 1 to 99 for the plot, the records published and read, for a Spark side where
its micro-batches went (`micro_batches`: medians of Spark's `durationMs` phases and of the rows
per batch), and with `--fraction` the search's probes and rates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from _harness import cli, isolated_workspace, write_results
from _load import publish_at_rate
from _peers import FLINK_KAFKA_CONNECTOR, start_peer
from _sides import Started, sustained
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

KEYS = 1_000
PEER_COMMIT_MS = 1_000
"""How often the peers commit their output by default: Flink's checkpoint interval, Quix
Streams' commit interval."""
_QUIET_S = 15
"""Once every record published came out, the output is read on until none came for this long
(a copy would come then)."""
_STALLED_S = 300
"""While records are missing, the output is read on until none came for this long: a first
micro-batch may take a minute on a loaded machine."""


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
    parser.add_argument("--peer-commit-ms", type=int, default=PEER_COMMIT_MS)
    parser.add_argument("--notes", help="what to know about this run, kept in the result")
    options = parser.parse_args()
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        spark = spark_session(workspace.settings, app_name="millrace-bench-latency")
        peers: dict[str, object] = {}
        sides: dict[str, Callable[[str, str], Started]] = {
            "millrace_processor": lambda source, out: _millrace(spark, workspace, source, out),
            "millrace_processor_deployed": lambda source, out: _deployed(workspace, source, out),
            "pyspark_default": lambda source, out: _pyspark(spark, workspace, source, out),
            "pyspark_real_time": lambda source, out: _pyspark(
                spark, workspace, source, out, real_time=True
            ),
            "pyflink": lambda source, out: _peer(
                workspace, "pyflink", source, out, options.peer_commit_ms, peers
            ),
            "quix_streams": lambda source, out: _peer(
                workspace, "quix_streams", source, out, options.peer_commit_ms, peers
            ),
        }
        results: dict[str, object] = {
            "seconds": options.seconds,
            "warmup_seconds": options.warmup_seconds,
            "peers": peers,
        }
        if options.notes:
            results["notes"] = options.notes
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
                results[name] = _measure(workspace, name, start, options)
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


def _measure(workspace, side: str, start: Callable[[str, str], Started], options) -> dict:
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
    read = _Output()
    reader = threading.Thread(
        target=_read_latencies,
        args=(workspace.settings.bootstrap_servers, output, options, read),
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
    read.published = _published(workspace.settings.bootstrap_servers, source)
    reader.join()
    started.stop()
    _check_once(side, read)
    latencies = read.latencies
    if not latencies:
        return {"records": 0, "records_in": read.published}
    ranked = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "records": len(latencies),
        "records_in": read.published,
        "records_out": read.numbers.total(),
        "median_ms": statistics.median(latencies),
        "p95_ms": ranked[94],
        "p99_ms": ranked[98],
        "percentiles_ms": ranked,
        **_micro_batches(started),
    }


def _micro_batches(started: Started) -> dict:
    """Where a Spark side's micro-batches went, from Spark's own progress: the median of each
    phase of `durationMs` and of the rows read, over the batches that read records, past the
    first five (start-up). Nothing for a peer, which runs no Spark query."""
    reported = (
        started.progress()
        if started.progress is not None
        else [progress for query in started.queries for progress in query.recentProgress]
    )
    batches = [progress for progress in reported if progress["numInputRows"] > 0][5:]
    if not batches:
        return {}
    phases = {phase for progress in batches for phase in progress["durationMs"]}
    return {
        "micro_batches": {
            "batches": len(batches),
            "sources": len(batches[0]["sources"]),
            "median_rows": statistics.median(progress["numInputRows"] for progress in batches),
            "median_phase_ms": {
                phase: statistics.median(p["durationMs"].get(phase, 0) for p in batches)
                for phase in sorted(phases)
            },
        }
    }


@dataclass
class _Output:
    """A side's output as read: latencies after warm-up, how often each record's number came,
    and, once the publisher is done, how many records were published."""

    latencies: list[float] = field(default_factory=list)
    numbers: Counter = field(default_factory=Counter)
    published: int | None = None

    def done(self, quiet_s: float) -> bool:
        """Whether to stop reading, no record having come for `quiet_s`."""
        if self.published is None:
            return False
        return quiet_s >= (_QUIET_S if len(self.numbers) >= self.published else _STALLED_S)


def _read_latencies(bootstrap_servers: str, stream: str, options, read: _Output) -> None:
    """Read `stream` into `read` until it is `done`."""
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
        while not read.done(time.monotonic() - last_seen):
            for message in consumer.consume(10_000, timeout=0.2):
                # Watermark markers (empty values, `millrace.bus.markers`) are no records.
                if message.error() or not message.value():
                    continue
                last_seen = time.monotonic()
                received_ms = time.time() * 1000
                record = json.loads(message.value())
                read.numbers[record["n"]] += 1
                sent_ms = record["sent_ms"]
                if sent_ms >= measured_from_ms:
                    read.latencies.append(received_ms - sent_ms)
    finally:
        consumer.close()


def _published(bootstrap_servers: str, source: str) -> int:
    """The records in `source`: the records published, numbered from 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "latency-count"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(source, bucket), timeout=10)[1]
            for bucket in range(2)
        )
    finally:
        consumer.close()


def _check_once(side: str, read: _Output) -> None:
    """Stop the benchmark unless every record published came out of `side` once."""
    numbers, published = read.numbers, read.published or 0
    missing = sum(1 for number in range(published) if number not in numbers)
    copies = numbers.total() - len(numbers)
    if missing or copies or len(numbers) != published:
        raise SystemExit(
            f"{side} wrote {numbers.total()} records for {len(numbers)} of the {published} "
            f"published: {missing} missing, {copies} copies"
        )


def stamped_records(first: int, count: int) -> list[bytes]:
    """`count` records stamped with the current time and numbered, for the publisher."""
    now_ms = int(time.time() * 1000)
    numbers = range(first, first + count)
    return [f'{{"time":{now_ms},"key":"k{n % KEYS}","n":{n}}}'.encode() for n in numbers]


def _millrace(spark: SparkSession, workspace, source: str, output: str) -> Started:
    from millrace import Input, Processor
    from millrace.apps.processors.streaming import start_processor_app

    class Relay(Processor):
        name = f"bench_relay_{uuid.uuid4().hex[:8]}"
        inputs = [Input(source, key="key", time="time", lateness="1s")]  # noqa: RUF012

        def on_record(self, key, record, ctx):
            sent = {"key": key, "sent_ms": ctx.event_time_ms, "n": record["n"]}
            ctx.produce(output, sent, key=key)

    running = start_processor_app(spark, workspace, Relay, available_now=False)
    return Started([running.query], source, running.stop)


_DEPLOYED_RELAY = """\
from millrace import Input, Processor


class Relay(Processor):
    name = {name!r}
    inputs = [Input({source!r}, key="key", time="time", lateness="1s")]

    def on_record(self, key, record, ctx):
        sent = {{"key": key, "sent_ms": ctx.event_time_ms, "n": record["n"]}}
        ctx.produce({output!r}, sent, key=key)
"""


def _deployed(workspace, source: str, output: str) -> Started:
    """The relay of `_millrace`, deployed into the workspace's host; running once it has run
    its first micro-batch."""
    from millrace.monitor.metrics_log import MetricsLog

    name = f"bench_relay_{uuid.uuid4().hex[:8]}"
    code = workspace.root / f"{name}.py"
    code.write_text(_DEPLOYED_RELAY.format(name=name, source=source, output=output))
    cli("deploy", f"{code}:Relay")
    metrics = MetricsLog(workspace.settings)
    deadline = time.monotonic() + _STALLED_S
    while not metrics.batches(name):
        if time.monotonic() > deadline:
            raise SystemExit(f"the deployed {name} ran no micro-batch in {_STALLED_S} s")
        time.sleep(1)
        metrics.refresh()

    def progress() -> list[dict]:
        metrics.refresh()
        return [
            {
                "numInputRows": batch.fields["input_rows"],
                "durationMs": batch.fields["durations_ms"],
                "sources": batch.fields["sources"],
            }
            for batch in metrics.batches(name)
        ]

    return Started([], source, lambda: cli("stop", name), progress)


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
    record = F.from_json(F.col("value").cast("string"), "time BIGINT, key STRING, n BIGINT")
    sent = F.struct(F.col("r.key").alias("key"), F.col("r.time").alias("sent_ms"), F.col("r.n"))
    relayed = raw.select(record.alias("r")).select(
        F.col("r.key").alias("key"), F.to_json(sent).alias("value")
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


def _peer(
    workspace, peer: str, source: str, output: str, commit_ms: int, peers: dict[str, object]
) -> Started:
    """The stage in a peer, run by its relay script (`_peers`); its settings to `peers`."""
    running = start_peer(
        peer,
        "relay",
        {
            "bootstrap_servers": workspace.settings.bootstrap_servers,
            "input": source,
            "output": output,
            "connector": FLINK_KAFKA_CONNECTOR,
            "commit_interval_ms": commit_ms,
        },
    )
    peers[peer] = running.settings
    return Started([], source, running.stop)


if __name__ == "__main__":
    main()
