"""Foundation figures: broker start-up, time to the first Spark micro-batch, publish rate.

Run it with `.venv/bin/python benchmarks/foundation.py` after `make setup`. It uses its own
workspace on free loopback ports, starts and stops its own broker, and writes a JSON result
to benchmarks/results/. Publish throughput is reported next to a baseline measured in the same
run: the raw confluent-kafka producer sending the same pre-encoded JSON bytes, so the ratio
shows what millrace's encoding, ids and checks cost.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from _harness import cli, isolated_workspace, write_results
from confluent_kafka import Producer

EVENTS = 100_000
UP_RUNS = 3


def main() -> None:
    results: dict[str, object] = {}
    with isolated_workspace():
        up_seconds = []
        for _ in range(UP_RUNS):
            cli("down")
            started = time.perf_counter()
            cli("up")
            up_seconds.append(time.perf_counter() - started)
        results["up_to_ready_broker_s"] = {
            "runs": up_seconds,
            "median": statistics.median(up_seconds),
        }
        results["publish"] = _publish_rates()
        results["spark"] = _first_micro_batch()
    write_results("foundation", results)


def _publish_rates() -> dict[str, float]:
    from millrace.bus.publisher import Publisher
    from millrace.bus.streams import create_stream
    from millrace.config.workspace import Workspace

    settings = Workspace.locate().settings
    events = [
        {
            "time": 1_767_225_600_000 + n,
            "event": f"e{n % 1000}",
            "category": "sports",
            "score": n / 7,
        }
        for n in range(EVENTS)
    ]
    rates = {}
    for run in range(2):  # interleaved, so that both see the same machine state
        create_stream(settings, f"bench.raw.{run}", buckets=4)
        create_stream(settings, f"bench.millrace.{run}", buckets=4)

        producer = Producer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "compression.type": "lz4",
                "partitioner": "murmur2_random",
            }
        )
        encoded = [(json.dumps(event).encode(), event["event"]) for event in events]
        started = time.perf_counter()
        for value, key in encoded:
            while True:
                try:
                    producer.produce(f"bench.raw.{run}", value, key=key)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        producer.flush()
        rates.setdefault("raw_producer_events_per_s", []).append(
            EVENTS / (time.perf_counter() - started)
        )

        started = time.perf_counter()
        with Publisher(f"bench.millrace.{run}", settings=settings) as publisher:
            for event in events:
                publisher.send(event, key=event["event"])
        rates.setdefault("publisher_events_per_s", []).append(
            EVENTS / (time.perf_counter() - started)
        )

    source = Path(tempfile.mkdtemp()) / "events.jsonl"
    source.write_text("\n".join(json.dumps(event) for event in events) + "\n")
    create_stream(settings, "bench.cli", buckets=4)
    started = time.perf_counter()
    cli("publish", "bench.cli", str(source), "--key", "event")
    cli_rate = EVENTS / (time.perf_counter() - started)
    raw = statistics.median(rates["raw_producer_events_per_s"])
    ours = statistics.median(rates["publisher_events_per_s"])
    return {
        "events": EVENTS,
        "raw_producer_events_per_s": raw,
        "publisher_events_per_s": ours,
        "publisher_to_raw_ratio": ours / raw,
        "cli_publish_events_per_s_including_start_up": cli_rate,
    }


def _first_micro_batch() -> dict[str, float]:
    from millrace.bus.streams import create_stream
    from millrace.config.workspace import Workspace
    from millrace.engine.session import spark_session, stop_spark_session
    from millrace.engine.streams import read_stream

    workspace = Workspace.locate()
    create_stream(workspace.settings, "bench.spark", buckets=4)
    cli(
        "publish",
        "bench.spark",
        "-",
        stdin="\n".join(
            json.dumps({"time": 1_767_225_600_000 + n, "event": "e"}) for n in range(1000)
        ),
    )
    started = time.perf_counter()
    spark = spark_session(workspace.settings, app_name="millrace-bench")
    session_s = time.perf_counter() - started
    query_started = time.perf_counter()
    source = read_stream(spark, workspace, "bench", "bench.spark", "event STRING", time="time")
    query = (
        source.records.writeStream.format("noop")
        .option("checkpointLocation", str(workspace.checkpoint("bench", "noop")))
        .start()
    )
    while query.lastProgress is None:
        time.sleep(0.05)
    first_batch_s = time.perf_counter() - query_started
    stop_spark_session()
    return {
        "session_start_s": session_s,
        "query_start_to_first_batch_s": first_batch_s,
        "session_start_to_first_batch_s": session_s + first_batch_s,
    }
