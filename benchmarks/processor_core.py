"""The Python work of one bucket's micro-batch of a processor, without Spark: where time goes.

Run it with `.venv/bin/python benchmarks/processor_core.py [--keys K ...] [--records R]
[--stored S] [--repeats N]`. For each key count it builds one bucket as the Spark runtime holds
it (S stored keys, each with a count and a timer) and times, N times each and interleaved,
the Python work of one micro-batch of R records for the per-key counter of
`benchmarks/processors.py` (stateful and monoid):

- `whole_bucket_json`: the bucket state as one JSON document of every key, decoded and
  encoded whole at each micro-batch (the runtime's format before `BucketStore`);
- `bucket_store`: `millrace.apps.processors.bucket_store.BucketStore`, one JSON text per key and a
  timer index: only the keys the micro-batch runs are decoded and encoded;
- `execution_only`: `execution.run_batch` alone, over state already decoded: the floor the
  state format leaves.

Each figure includes decoding the records' JSON. The result is milliseconds per micro-batch
(median) and microseconds per record; it goes to benchmarks/results/processor-core-*.json.
It measures Python only: Spark's share (Arrow, the state store, Kafka) is not in it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from _harness import write_results
from processors import _counter, _monoid_counter

START_MS = 1_767_225_600_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, action="append", help="distinct keys (1000, 100000)")
    parser.add_argument("--records", type=int, default=800, help="records of the micro-batch")
    parser.add_argument("--stored", type=int, default=1600, help="keys stored in the bucket")
    parser.add_argument("--repeats", type=int, default=20)
    options = parser.parse_args()
    results: dict[str, Any] = {
        "records": options.records,
        "stored": options.stored,
        "repeats": options.repeats,
    }
    for keys in options.keys or [1_000, 100_000]:
        for kind, make in (("stateful", _counter), ("monoid", _monoid_counter)):
            results[f"keys_{keys}_{kind}"] = _measure(
                make("s", "out", START_MS + 10**9), keys, options
            )
            print(kind, keys, results[f"keys_{keys}_{kind}"], flush=True)
    write_results("processor-core", results)


def _measure(processor_class: type, keys: int, options: argparse.Namespace) -> dict[str, float]:
    from millrace.apps.processors.bucket_store import BucketStore
    from millrace.processor.execution import run_batch
    from millrace.records import Record, decode_value

    rng = random.Random(keys)
    processor = processor_class()
    stored_keys = min(options.stored, keys)
    seed = [
        Record("s", 0, n, None, f"seed{n}", START_MS, {"key": f"k{n}", "time": START_MS})
        for n in range(stored_keys)
    ]
    states = run_batch(processor, {}, seed, watermark_ms=None, processing_time_ms=0).states
    store = BucketStore(None, None)
    store.update(states, processor="bench")
    texts = store.encode()
    whole = json.dumps([[key, state] for key, state in states.items()])
    values = [
        json.dumps({"key": f"k{rng.randrange(keys)}", "time": START_MS + n}).encode()
        for n in range(options.records)
    ]
    watermark_ms = START_MS - 1

    def records() -> list[Record]:
        return [
            Record("s", 0, n, None, f"r{n}", START_MS + n, decode_value(value))
            for n, value in enumerate(values)
        ]

    def whole_bucket_json() -> None:
        stored = {key: state for key, state in json.loads(whole)}
        outcome = run_batch(
            processor, stored, records(), watermark_ms=watermark_ms, processing_time_ms=5
        )
        stored.update(outcome.states)
        min(
            (t for state in stored.values() for _, t in state.get("timers", {}).values()),
            default=None,
        )
        json.dumps([[key, state] for key, state in stored.items()])

    def bucket_store() -> None:
        bucket = BucketStore(*texts)
        outcome = run_batch(
            processor,
            bucket,
            records(),
            watermark_ms=watermark_ms,
            processing_time_ms=5,
            timer_keys=bucket.due_keys(watermark_ms),
        )
        bucket.update(outcome.states, processor="bench")
        bucket.next_timer_ms()
        bucket.encode()

    def execution_only() -> None:
        run_batch(
            processor,
            states,
            records(),
            watermark_ms=watermark_ms,
            processing_time_ms=5,
            timer_keys=(),
        )

    sides: dict[str, Callable[[], None]] = {
        "whole_bucket_json": whole_bucket_json,
        "bucket_store": bucket_store,
        "execution_only": execution_only,
    }
    timings: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(options.repeats):
        for side, run in sides.items():
            started = time.perf_counter()
            run()
            timings[side].append(time.perf_counter() - started)
    result: dict[str, float] = {}
    for side, seconds in timings.items():
        median = statistics.median(seconds)
        result[f"{side}_ms"] = median * 1000
        result[f"{side}_us_per_record"] = median / options.records * 1e6
    result["whole_bucket_json_to_bucket_store_ratio"] = (
        result["whole_bucket_json_ms"] / result["bucket_store_ms"]
    )
    return result


if __name__ == "__main__":
    main()
