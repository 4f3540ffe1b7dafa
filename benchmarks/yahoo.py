"""The Yahoo Streaming Benchmark (Structured Streaming paper, section 9.1), millrace and by hand.

Run it with `.venv/bin/python benchmarks/yahoo.py [--events N] [--rounds R] [--sustained
[--probe-seconds S] [--warmup-seconds W] [--start-rate R0] [--refinements K]]` after
`make setup`. Ad events arrive from Kafka as JSON (user, page, ad, ad type, event type, event
time, IP address); the query keeps the views, joins each ad to its campaign (100 campaigns of
10 ads), counts the views per campaign per 10-second event-time window, and writes the counts
to Kafka. Three sides read the same records:

- `millrace`: the query as a millrace SQL app (`JOIN LOOKUP` on a serving table of the
  campaigns, in Redis, as the paper's Laser would hold them; the result table emitted to a
  stream, and kept in Delta as every result table is);
- `handwritten_pyspark`: the same query hand-written in PySpark, the campaigns a static
  DataFrame broadcast to the join (as the Structured Streaming paper ran it), the closed
  windows written to Delta and to a Kafka stream in each micro-batch;
- `ceiling`: the records read from Kafka and their JSON decoded, with no processing.

Both query sides must write the same rows. Measurements, as in benchmarks/dstreams.py: drain
(N loaded events, R interleaved rounds after warm-up runs, events/s over the time spent in
micro-batches; the input ends with an event an hour later so every window closes), and with
`--sustained` the maximum sustainable input rate of both query sides, and of the millrace app
with `semantics = 'at_least_once'` (`millrace_at_least_once`, without deduplication), from
probes interleaved in the same run (benchmarks/_load.py).

The result goes to benchmarks/results/yahoo-*.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from collections.abc import Callable

from _harness import buckets_of, isolated_workspace, produce, write_results
from _sides import (
    Started,
    at_least_once,
    ceiling,
    compare,
    millrace_app,
    start_handwritten,
    sustained,
)
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

START_MS = 1_767_225_600_000
EVENTS_PER_S = 20_000
"""Event-time rate of loaded events: N events span N / EVENTS_PER_S seconds."""
CAMPAIGNS, ADS_PER_CAMPAIGN = 100, 10
EVENT_TYPES = ("view", "click", "purchase")
_SCHEMA = (
    "user_id STRING, page_id STRING, ad_id STRING, ad_type STRING, event_type STRING, "
    "time BIGINT, ip_address STRING"
)

APP = """
CREATE APPLICATION yahoo_{run};
CREATE INPUT TABLE ad_events (
  user_id STRING, page_id STRING, ad_id STRING, ad_type STRING, event_type STRING,
  ip_address STRING
) FROM STREAM('STREAM_NAME') TIME time LATENESS '2 seconds';
CREATE VIEW campaign_views AS
SELECT e.time, c.campaign_id
FROM ad_events e JOIN LOOKUP campaigns c ON c.ad_id = e.ad_id
WHERE e.event_type = 'view';
CREATE TABLE campaign_counts WITH (emit = 'OUTPUT_NAME') AS
SELECT campaign_id, COUNT(*) AS n FROM campaign_views [10 seconds] GROUP BY campaign_id;
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sustained", action="store_true")
    parser.add_argument("--probe-seconds", type=float, default=60)
    parser.add_argument("--warmup-seconds", type=float, default=20)
    parser.add_argument("--start-rate", type=int, default=20_000)
    parser.add_argument("--refinements", type=int, default=2)
    options = parser.parse_args()
    with isolated_workspace():
        from millrace.bus.streams import create_stream
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        stream = "bench.ads"
        create_stream(workspace.settings, stream, buckets=2)
        _load(workspace.settings.bootstrap_servers, stream, options.events)
        _serve_campaigns(workspace)
        spark = spark_session(workspace.settings, app_name="millrace-bench-yahoo")
        campaigns = spark.createDataFrame(_campaign_rows(), "ad_id STRING, campaign_id STRING")
        results: dict[str, object] = {
            "events": options.events,
            "event_time_rate": EVENTS_PER_S,
            "spark": {
                "master": workspace.settings.spark_master,
                "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
            },
        }
        try:
            results["drain"] = compare(
                spark,
                options.events,
                options.rounds,
                {
                    "millrace": lambda: millrace_app(spark, workspace, _app(workspace, stream)),
                    "handwritten_pyspark": lambda: _handwritten(
                        spark, workspace, stream, campaigns
                    ),
                    "ceiling": lambda: ceiling(
                        workspace, _events(spark, workspace, stream, watermark=False)
                    ),
                },
            )
            if options.sustained:
                results["sustained"] = _sustained(spark, workspace, campaigns, options)
        finally:
            stop_spark_session()
    write_results("yahoo", results)


def _app(workspace, stream: str) -> str:
    """The app's text reading `stream`, emitting to a fresh stream of its own."""
    from millrace.bus.streams import create_stream

    output = f"bench.ads.counts.{uuid.uuid4().hex[:8]}"
    create_stream(workspace.settings, output, buckets=2)
    return APP.replace("STREAM_NAME", stream).replace("OUTPUT_NAME", output)


def _handwritten(
    spark: SparkSession, workspace, stream: str, campaigns: DataFrame, available_now: bool = True
):
    """The query by hand; with `available_now` a `Run`, otherwise the running query."""
    from millrace.bus.streams import create_stream

    output = f"bench.ads.counts.{uuid.uuid4().hex[:8]}"
    create_stream(workspace.settings, output, buckets=2)
    table = str(workspace.tables_dir / "bench" / uuid.uuid4().hex[:8])
    counts = (
        _events(spark, workspace, stream)
        .where(F.col("event_type") == "view")
        .join(F.broadcast(campaigns), "ad_id")
        .groupBy(F.window("time", "10 seconds"), "campaign_id")
        .agg(F.count(F.lit(1)).alias("n"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "campaign_id",
            "n",
        )
    )

    def write(batch: DataFrame, _: int) -> None:
        batch.persist()
        batch.write.format("delta").mode("append").save(table)
        batch.select(F.to_json(F.struct(*batch.columns)).alias("value")).write.format("kafka").mode(
            "append"
        ).option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers).option(
            "topic", output
        ).save()
        batch.unpersist()

    writer = (
        counts.writeStream.outputMode("append")
        .foreachBatch(write)
        .option("checkpointLocation", str(workspace.checkpoint("bench", uuid.uuid4().hex[:8])))
    )
    return start_handwritten(writer, spark, table, available_now)


def _sustained(spark: SparkSession, workspace, campaigns: DataFrame, options) -> dict:
    def start_millrace(stream: str, rewrite: Callable[[str], str] = str) -> Started:
        app = rewrite(_app(workspace, stream))
        running = millrace_app(spark, workspace, app, available_now=False)
        return Started(running.queries, stream, running.stop)

    def start_handwritten(stream: str) -> Started:
        query = _handwritten(spark, workspace, stream, campaigns, available_now=False)
        return Started([query], stream)

    return sustained(
        workspace,
        {
            "millrace": start_millrace,
            "millrace_at_least_once": lambda stream: start_millrace(stream, at_least_once),
            "handwritten_pyspark": start_handwritten,
        },
        live_payloads,
        options,
        label="yahoo",
    )


def _events(spark: SparkSession, workspace, stream: str, watermark: bool = True) -> DataFrame:
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", stream)
        .option("startingOffsets", "earliest")
        # As millrace's readers fetch (`millrace.engine.kafka`): the end of each bucket's read
        # is not held by the broker, so that the ratio is what millrace adds per record.
        .option("kafka.fetch.max.wait.ms", "10")
        .load()
    )
    events = (
        raw.select(F.from_json(F.col("value").cast("string"), _SCHEMA).alias("event"))
        .select("event.*")
        .withColumn("time", F.timestamp_millis("time"))
    )
    return events.withWatermark("time", "2 seconds") if watermark else events


def _campaign_rows() -> list[tuple[str, str]]:
    return [
        (f"ad-{campaign}-{ad}", f"campaign-{campaign}")
        for campaign in range(CAMPAIGNS)
        for ad in range(ADS_PER_CAMPAIGN)
    ]


def _serve_campaigns(workspace) -> None:
    """The campaigns as the serving table `campaigns`, keyed by ad, for the lookup join."""
    from millrace.serving.tables import TableSpec, create_table, write_rows

    spec = create_table(
        workspace.settings,
        TableSpec("campaigns", (("ad_id", "STRING"),), (("campaign_id", "STRING"),)),
    )
    rows = _campaign_rows()
    write_rows(
        workspace.settings.redis,
        spec,
        {"ad_id": [ad for ad, _ in rows], "campaign_id": [campaign for _, campaign in rows]},
    )


def _event(generator: random.Random, time_ms: int) -> str:
    campaign, ad = generator.randrange(CAMPAIGNS), generator.randrange(ADS_PER_CAMPAIGN)
    return json.dumps(
        {
            "user_id": f"user-{generator.randrange(100_000)}",
            "page_id": f"page-{generator.randrange(10_000)}",
            "ad_id": f"ad-{campaign}-{ad}",
            "ad_type": generator.choice(("banner", "modal", "sponsored-search", "mail", "mobile")),
            "event_type": generator.choice(EVENT_TYPES),
            "time": time_ms,
            "ip_address": "1.2.3.4",
        }
    )


_LIVE = random.Random(11)
_LIVE_POOL = [_event(_LIVE, 0).replace('"time": 0', '"time": {time}') for _ in range(1_000)]


def live_payloads(first: int, count: int) -> list[bytes]:
    """`count` ad events stamped with the current time, for the sustained-rate publisher."""
    now_ms = str(int(time.time() * 1000))
    return [
        _LIVE_POOL[(first + offset) % len(_LIVE_POOL)].replace("{time}", now_ms).encode()
        for offset in range(count)
    ]


def _load(bootstrap_servers: str, stream: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "linger.ms": 20, "compression.type": "lz4"}
    )
    generator = random.Random(42)
    for number in range(count + 1):
        time_ms = START_MS + number * 1000 // EVENTS_PER_S + generator.randrange(-1000, 1000)
        event = _event(generator, time_ms)
        if number == count:
            # Its watermark closes every window. It is a view because Spark pushes the
            # hand-written filter below the watermark: a filtered-out event would not move it.
            event = (
                _event(generator, time_ms + 3_600_000)
                .replace('"event_type": "click"', '"event_type": "view"')
                .replace('"event_type": "purchase"', '"event_type": "view"')
            )
        for bucket in buckets_of(producer, stream) if number == count else [None]:
            produce(producer, stream, event.encode(), f"ad:{number}", bucket)
    producer.flush()


if __name__ == "__main__":
    main()
