"""The Discretized Streams paper's workloads (section 6.1) as millrace SQL apps and by hand.

Run it with `.venv/bin/python benchmarks/dstreams.py [--workload grep|wordcount|topk ...]
[--records N] [--rounds R] [--sustained [--probe-seconds S] [--warmup-seconds W]
[--start-rate R0] [--refinements K]]` after `make setup`. The input is 100-byte lines of words
(each a JSON record with its event time), and the three workloads are the paper's:

- `grep`: the number of lines that contain a pattern, per second of event time;
- `wordcount`: the count of every word over a 30-second window sliding every second;
- `topk`: the 10 most frequent words over a 30-second window sliding every second.

Each workload runs three sides over the same records: the millrace SQL app, the same query
hand-written in PySpark (both append the closed windows to a Delta table, keep a 2-second
watermark, and must write the same rows), and the ceiling: the records read from Kafka and
their JSON decoded, with no processing.

Two measurements:

- drain (always): N loaded records, each side run R times interleaved over all of them after
  warm-up runs (trigger available-now, `_sides.compare`); events/s over the time spent in
  micro-batches. The input ends with a record an hour later than the rest so that every
  window closes.
- sustained (with `--sustained`): the papers' maximum sustainable throughput, the highest
  input rate at which processing lag stays bounded for S seconds, found by a short search
  (see benchmarks/_load.py), for the millrace app and the hand-written query, interleaved.

The result goes to benchmarks/results/dstreams-*.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable

from _harness import buckets_of, isolated_workspace, produce, write_results
from _sides import Started, ceiling, compare, handwritten, millrace_app, sustained
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

START_MS = 1_767_225_600_000
EVENTS_PER_S = 20_000
"""Event-time rate of loaded lines: N lines span N / EVENTS_PER_S seconds."""
PATTERN = "needle"
LINES = 1_000
_SCHEMA = "time BIGINT, line STRING"
"""The generator draws lines from this many distinct ones, about 1% of them with the pattern."""

APPS = {
    "grep": """
CREATE APPLICATION grep_{run};
CREATE INPUT TABLE lines (line STRING) FROM STREAM('STREAM_NAME') TIME time LATENESS '2 seconds';
CREATE VIEW matching AS SELECT * FROM lines WHERE line LIKE '%needle%';
CREATE TABLE matches AS SELECT COUNT(*) AS n FROM matching [1 second];
""",
    "wordcount": """
CREATE APPLICATION wordcount_{run};
CREATE INPUT TABLE lines (line STRING) FROM STREAM('STREAM_NAME') TIME time LATENESS '2 seconds';
CREATE VIEW words AS SELECT explode(split(line, ' ')) AS word, time FROM lines;
CREATE TABLE counts AS SELECT word, COUNT(*) AS n FROM words [30 seconds SLIDE 1 second]
GROUP BY word;
""",
    "topk": """
CREATE APPLICATION topk_{run};
CREATE INPUT TABLE lines (line STRING) FROM STREAM('STREAM_NAME') TIME time LATENESS '2 seconds';
CREATE VIEW words AS SELECT explode(split(line, ' ')) AS word, time FROM lines;
CREATE TABLE top_words AS SELECT TOPK(word, 1, 10) AS top_words, COUNT(*) AS n
FROM words [30 seconds SLIDE 1 second];
""",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=sorted(APPS))
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sustained", action="store_true")
    parser.add_argument("--probe-seconds", type=float, default=60)
    parser.add_argument("--warmup-seconds", type=float, default=20)
    parser.add_argument("--start-rate", type=int, default=10_000)
    parser.add_argument("--refinements", type=int, default=2)
    options = parser.parse_args()
    workloads = options.workload or sorted(APPS)
    with isolated_workspace():
        from millrace.bus.streams import create_stream
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        stream = "bench.lines"
        create_stream(workspace.settings, stream, buckets=2)
        _load(workspace.settings.bootstrap_servers, stream, options.records)
        spark = spark_session(workspace.settings, app_name="millrace-bench-dstreams")
        results: dict[str, object] = {
            "records": options.records,
            "event_time_rate": EVENTS_PER_S,
            "spark": {
                "master": workspace.settings.spark_master,
                "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
            },
        }
        try:
            for name in workloads:
                app = APPS[name].replace("STREAM_NAME", stream)
                results[name] = {
                    "drain": compare(
                        spark,
                        options.records,
                        options.rounds,
                        {
                            "millrace": lambda app=app: millrace_app(spark, workspace, app),
                            "handwritten_pyspark": lambda name=name: handwritten(
                                workspace, HANDWRITTEN[name](_lines(spark, workspace, stream))
                            ),
                            "ceiling": lambda: ceiling(
                                workspace, _lines(spark, workspace, stream, watermark=False)
                            ),
                        },
                    )
                }
                if options.sustained:
                    results[name]["sustained"] = _sustained(spark, workspace, name, options)
        finally:
            stop_spark_session()
    write_results("dstreams", results)


def _sustained(spark: SparkSession, workspace, name: str, options) -> dict[str, object]:
    """The highest input rate each side sustains, the two searches' probes interleaved."""

    def start_millrace(stream: str) -> Started:
        running = millrace_app(
            spark, workspace, APPS[name].replace("STREAM_NAME", stream), available_now=False
        )
        return Started(running.queries, stream, running.stop)

    def start_handwritten(stream: str) -> Started:
        query = handwritten(
            workspace, HANDWRITTEN[name](_lines(spark, workspace, stream)), available_now=False
        )
        return Started([query], stream)

    return sustained(
        workspace,
        {"millrace": start_millrace, "handwritten_pyspark": start_handwritten},
        live_payloads,
        options,
        label=name,
    )


def _lines(spark: SparkSession, workspace, stream: str, watermark: bool = True) -> DataFrame:
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", stream)
        .option("startingOffsets", "earliest")
        .load()
    )
    lines = (
        raw.select(F.from_json(F.col("value").cast("string"), _SCHEMA).alias("record"))
        .select("record.*")
        .withColumn("time", F.timestamp_millis("time"))
    )
    return lines.withWatermark("time", "2 seconds") if watermark else lines


def _grep(lines: DataFrame) -> DataFrame:
    matching = lines.where(F.col("line").contains(PATTERN))
    counts = matching.groupBy(F.window("time", "1 second")).agg(F.count(F.lit(1)).alias("n"))
    return _with_window_columns(counts)


def _wordcount(lines: DataFrame) -> DataFrame:
    words = lines.select(F.explode(F.split("line", " ")).alias("word"), "time")
    counts = words.groupBy(F.window("time", "30 seconds", "1 second"), "word").agg(
        F.count(F.lit(1)).alias("n")
    )
    return _with_window_columns(counts)


def _topk(lines: DataFrame) -> DataFrame:
    words = lines.select(F.explode(F.split("line", " ")).alias("word"), "time")
    per_word = words.groupBy(F.window("time", "30 seconds", "1 second"), "word").agg(
        F.count(F.lit(1)).alias("n")
    )
    # Heaviest first, ties by word: sort on (-weight, word), then give millrace's item/weight.
    ranked = F.sort_array(
        F.collect_list(F.struct((-F.col("n").cast("double")).alias("negative"), "word"))
    )
    top = per_word.groupBy("window").agg(
        F.transform(
            F.slice(ranked, 1, 10),
            lambda entry: F.struct(
                entry["word"].alias("item"), (-entry["negative"]).alias("weight")
            ),
        ).alias("top_words"),
        F.sum("n").alias("n"),
    )
    return _with_window_columns(top)


def _with_window_columns(frame: DataFrame) -> DataFrame:
    return frame.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *[column for column in frame.columns if column != "window"],
    )


HANDWRITTEN: dict[str, Callable[[DataFrame], DataFrame]] = {
    "grep": _grep,
    "wordcount": _wordcount,
    "topk": _topk,
}


def _line_pool() -> list[str]:
    """`LINES` lines of about 100 bytes as JSON records: Zipf-like words, 1% with the pattern."""
    generator = random.Random(7)
    words = [f"w{number}" for number in range(10_000)]
    pool = []
    for number in range(LINES):
        chosen = [PATTERN] if number % 100 == 0 else []
        while len(" ".join(chosen)) < 80:
            chosen.append(words[min(int(generator.paretovariate(1.1)), len(words)) - 1])
        pool.append(" ".join(chosen))
    return pool


_POOL = _line_pool()


def live_payloads(first: int, count: int) -> list[bytes]:
    """`count` line records stamped with the current time, for the sustained-rate publisher."""
    now_ms = int(time.time() * 1000)
    return [
        f'{{"time":{now_ms},"line":"{_POOL[(first + offset) % LINES]}"}}'.encode()
        for offset in range(count)
    ]


def _load(bootstrap_servers: str, stream: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "linger.ms": 20, "compression.type": "lz4"}
    )
    generator = random.Random(42)
    for number in range(count + 1):
        time_ms = START_MS + number * 1000 // EVENTS_PER_S + generator.randrange(-1000, 1000)
        line = _POOL[generator.randrange(LINES)]
        if number == count:
            # Its watermark closes every window. It holds the pattern because Spark pushes the
            # hand-written grep's filter below the watermark: a filtered-out line would not
            # move it.
            time_ms, line = time_ms + 3_600_000, _POOL[0]
        value = json.dumps({"time": time_ms, "line": line})
        for bucket in buckets_of(producer, stream) if number == count else [None]:
            produce(producer, stream, value.encode(), f"bench:{number}", bucket)
    producer.flush()


if __name__ == "__main__":
    main()
