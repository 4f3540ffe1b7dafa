"""Serving-table write throughput from Spark executors, next to one redis-py pipeline loop.

Run it with `.venv/bin/python benchmarks/serving.py [--rows N] [--keys K] [--partitions P]
[--rounds R]` after `make setup`. It upserts the same N rows (K distinct keys, N / K
consecutive rows each, a STRING and a DOUBLE value) into a serving table R times per side,
interleaved, after one round of each that warms up and is not kept:

- `millrace_executors`: `millrace.serving.sink.write_table` on a DataFrame of the rows
  in P partitions: each executor task sends its partition's Arrow batches to Redis as
  pipelines of `SET key json PX ttl`, as serving-table feeds and apps write;
- `millrace_one_process`: `millrace.serving.tables.write_rows`, the function each executor
  task runs, called once in the driver over the rows in memory: what the executors add;
- `redis_py_pipeline`: the baseline, one Python loop in the driver over the same rows,
  already in memory as Python lists, encoding each row as the same JSON and sending
  `SET ... PX` in pipelines of 5,000 (the fastest a single redis-py client writes them).

After every run the table is checked: it holds K rows, and sampled rows equal what plain
Python computes as the last row of their key (a mismatch stops the benchmark with SystemExit).
Rows/s are N over the run's wall-clock seconds (for the executor side this includes Spark
planning the job; generating the rows is not measured). The ratio is of the medians,
each millrace side over the baseline. The result goes to benchmarks/results/serving-*.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import redis
from _harness import isolated_workspace, write_results
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

SIDES = ("millrace_executors", "millrace_one_process", "redis_py_pipeline")
TTL_MS = 3_600_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session
        from millrace.serving.sink import write_table
        from millrace.serving.tables import (
            TableSpec,
            create_table,
            drop_table,
            get_rows,
            write_rows,
        )

        workspace = Workspace.locate()
        settings = workspace.settings
        spark = spark_session(settings, "serving-benchmark")
        rows, keys = options.rows, options.keys
        # Each key's rows are consecutive, so that they lie in one partition, in order: the
        # table holds the last of them, as a feed holds the last update of a key's bucket.
        group = rows // keys
        if rows % keys or (rows // options.partitions) % group:
            raise SystemExit("--rows must be a multiple of --keys and of partitions * rows/keys")
        frame = (
            spark.range(rows, numPartitions=options.partitions)
            .select(
                F.concat(F.lit("k"), (F.col("id") / group).cast("bigint").cast("string")).alias(
                    "key"
                ),
                F.concat(F.lit("t"), (F.col("id") % 97).cast("string")).alias("topic"),
                (F.col("id") * 0.5).alias("score"),
            )
            .cache()
        )
        frame.count()
        columns = {
            "key": [f"k{n // group}" for n in range(rows)],
            "topic": [f"t{n % 97}" for n in range(rows)],
            "score": [n * 0.5 for n in range(rows)],
        }
        last = {  # plain Python: the last row of each key
            columns["key"][n]: {c: columns[c][n] for c in ("key", "topic", "score")}
            for n in range(rows)
        }
        sample = random.Random(1).sample(sorted(last), min(1000, keys))

        def run(side: str, round_: int) -> float:
            spec = create_table(
                settings,
                TableSpec(
                    f"bench_{side}_{round_}",
                    (("key", "STRING"),),
                    (("topic", "STRING"), ("score", "DOUBLE")),
                    TTL_MS,
                ),
            )
            started = time.perf_counter()
            if side == "millrace_executors":
                written = write_table(frame, spec, settings.redis)
            elif side == "millrace_one_process":
                written = write_rows(settings.redis, spec, columns)
            else:
                written = _pipeline_loop(settings.redis, spec.name, columns)
            elapsed = time.perf_counter() - started
            found = get_rows(settings, spec.name, sample)
            held = drop_table(settings, spec.name)
            if written != rows or held != len(last) or found != [last[k] for k in sample]:
                raise SystemExit(
                    f"{side}: wrote {written} of {rows} rows, the table held {held} of "
                    f"{len(last)} keys, or sampled rows differ from plain Python"
                )
            return elapsed

        seconds: dict[str, list[float]] = {side: [] for side in SIDES}
        for round_ in range(options.rounds + 1):
            for side in SIDES:
                elapsed = run(side, round_)
                print(f"round {round_}: {side} {rows / elapsed:,.0f} rows/s ({elapsed:.2f} s)")
                if round_:  # round 0 warms up
                    seconds[side].append(elapsed)
        stop_spark_session()
        medians = {side: statistics.median(values) for side, values in seconds.items()}
        write_results(
            "serving",
            {
                "rows": rows,
                "keys": keys,
                "partitions": options.partitions,
                "rounds": options.rounds,
                "rows_per_s": {side: round(rows / medians[side]) for side in SIDES},
                "seconds": seconds,
                "ratios_over_redis_py_pipeline": {
                    side: round(medians["redis_py_pipeline"] / medians[side], 2)
                    for side in SIDES
                    if side != "redis_py_pipeline"
                },
            },
        )


def _pipeline_loop(url: str, table: str, columns: dict[str, list]) -> int:
    """The baseline: one client, one loop, SETs of the same JSON rows in pipelines of 5,000."""
    client = redis.Redis.from_url(url)
    pipeline = client.pipeline(transaction=False)
    prefix = f"millrace:t:{table}:"
    written = 0
    for key, topic, score in zip(columns["key"], columns["topic"], columns["score"], strict=True):
        row = json.dumps({"key": key, "topic": topic, "score": score}, separators=(",", ":"))
        pipeline.set(prefix + key, row, px=TTL_MS)
        written += 1
        if written % 5_000 == 0:
            pipeline.execute()
    pipeline.execute()
    client.close()
    return written


if __name__ == "__main__":
    main()
