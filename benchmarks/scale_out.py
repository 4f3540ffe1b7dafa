"""Scale-out: one SQL app draining a backlog on a local Spark cluster of 1 worker, then of 2.

Run it with `.venv/bin/python benchmarks/scale_out.py [--records N] [--rounds R]` after
`make setup`, on a machine doing nothing else. It publishes N records (300,000 by default)
to a stream of 4 buckets, then R times each (2 by default, alternating) starts a local
standalone cluster (`millrace.engine.local_cluster`, each worker 1 core and 1 GB) of 1 or 2
workers and runs a windowed count over the whole backlog on it (`millrace run --available-now
--master spark://...`, 50,000 records a micro-batch), each run a new app that reads from the
stream's start. A run's figure is records per second over its micro-batches: from the first
one's planning to the last one's commit, in the app's write-ahead log (`millrace history
--json`), so the driver's and executors' start are left out.

On a machine of two cores both workers share them with the driver, the broker and each
other: the ratio says how much of one core's work a second worker takes on, here, not what a
second machine would add.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from _harness import cli, cli_json, free_port, isolated_workspace, write_results
from confluent_kafka import Producer

from millrace.config.workspace import Workspace
from millrace.engine.local_cluster import start_cluster, stop_cluster

STREAM = "bench.scale-out"
BUCKETS = 4
START_MS = 1_767_225_600_000
APP = """CREATE APPLICATION {name};
CREATE INPUT TABLE events (time, category, n INT)
  FROM STREAM('{stream}') TIME time LATENESS '1 minute';
CREATE TABLE per_minute WITH (mode = 'updates') AS
SELECT category, COUNT(*) AS events, SUM(n) AS total FROM events [1 minute] GROUP BY category;
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000, help="Records in the backlog.")
    parser.add_argument("--rounds", type=int, default=2, help="Runs on each cluster size.")
    arguments = parser.parse_args()
    with isolated_workspace() as home:
        cli("stream", "create", STREAM, "--buckets", str(BUCKETS))
        workspace = Workspace.locate()
        _publish(workspace, arguments.records)
        rates: dict[str, list[float]] = {"1_worker": [], "2_workers": []}
        for round_ in range(arguments.rounds):
            for workers, side in ((1, "1_worker"), (2, "2_workers")):
                name = f"scale_out_{workers}_{round_}"
                rates[side].append(_drain(workspace, home, workers, name))
    write_results(
        "scale-out",
        {
            "records": arguments.records,
            "rounds": arguments.rounds,
            "scale_out": {f"{side}_records_per_s": rounds for side, rounds in rates.items()},
        },
    )


def _publish(workspace: Workspace, records: int) -> None:
    """`records` events over 10 categories, a millisecond apart, spread over the buckets."""
    producer = Producer({"bootstrap.servers": workspace.settings.bootstrap_servers})
    for number in range(records):
        value = {"time": START_MS + number, "category": f"c{number % 10}", "n": number % 7}
        producer.produce(STREAM, json.dumps(value).encode(), partition=number % BUCKETS)
        if number % 10_000 == 0:
            producer.flush()
    producer.flush()


def _drain(workspace: Workspace, home: Path, workers: int, name: str) -> float:
    """Run app `name` over the whole backlog on a fresh cluster of `workers`; records per s."""
    settings = replace(workspace.settings, spark_cluster_port=free_port())
    on_its_port = replace(workspace, settings=settings)
    source = home / f"{name}.sql"
    source.write_text(APP.format(name=name, stream=STREAM))
    cluster = start_cluster(on_its_port, workers)
    run = ["run", str(source), "--available-now", "--master", cluster.url]
    try:
        subprocess.run(
            [sys.executable, "-m", "millrace.cli.main", *run],
            check=True,
            capture_output=True,
            env={**os.environ, "MILLRACE_SPARK_MAX_RECORDS_PER_BATCH": "50000"},
        )
    finally:
        stop_cluster(on_its_port)
        time.sleep(2)  # the workers' executors end after their workers
    batches = sorted(cli_json("history", name), key=lambda batch: batch["batch"])
    first, last = batches[0], batches[-1]
    read = _offset(last) - _offset(first)
    seconds = datetime.fromisoformat(last["committed"]) - datetime.fromisoformat(first["committed"])
    return read / seconds.total_seconds()


def _offset(batch: dict) -> int:
    """The records of the stream read up to the end of `batch`, over its buckets."""
    return sum(
        offset
        for source in batch["offsets"]
        if isinstance(source, dict)
        for offset in source.get(STREAM, {}).values()
    )


if __name__ == "__main__":
    main()
