"""How long a bus of three Kafka nodes takes to answer for a lost node's buckets.

Run it with `.venv/bin/python benchmarks/broker_loss.py [--rounds N]` after `make setup`. Each
round (5 by default) starts a local bus of three KRaft nodes (`kafka.brokers = 3`) in a
workspace of its own, creates a stream of 3 buckets with 3 copies, publishes 300 records,
kills node 2 with kill -9 and times `describe_stream` (the request for every bucket's offsets
an app makes as it starts) from the kill until it answers; the answer must equal the one
before the kill. Node 2 leads one bucket, which waits for the bus to fence the node (its
session timeout, 9 s) and choose a new leader; that wait is the failover time, under
`broker_loss.three_nodes`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

from _harness import write_results

from millrace.bus.broker import broker_status, start_broker, stop_broker
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream, describe_stream
from millrace.config.local_processes import free_loopback_ports
from millrace.config.workspace import Workspace, init_workspace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="Buses started and failed over.")
    arguments = parser.parse_args()
    failover_s = [_one_round() for _ in range(arguments.rounds)]
    write_results(
        "broker-loss",
        {
            "broker_loss": {
                "three_nodes": {
                    "median_failover_s": statistics.median(failover_s),
                    "failover_s": failover_s,
                }
            }
        },
    )


def _one_round() -> float:
    home = Path(tempfile.mkdtemp(prefix="millrace-bench-"))
    first = free_loopback_ports(6)
    workspace = Workspace.locate(
        {
            "MILLRACE_HOME": str(home),
            "MILLRACE_KAFKA_BROKERS": "3",
            "MILLRACE_KAFKA_PORT": str(first),
            "MILLRACE_KAFKA_CONTROLLER_PORT": str(first + 1),
            "MILLRACE_KAFKA_HEAP": "512m",
        }
    )
    init_workspace(workspace)
    start_broker(workspace)
    try:
        create_stream(workspace.settings, "failover", buckets=3)
        with Publisher("failover", settings=workspace.settings) as out:
            for number in range(300):
                out.send({"time": number, "n": number}, record_id=f"r{number}")
        before = describe_stream(workspace.settings, "failover")
        lost = broker_status(workspace).node_pids[1]
        assert lost is not None
        os.kill(lost, signal.SIGKILL)
        started = time.monotonic()
        after = describe_stream(workspace.settings, "failover")
        seconds = time.monotonic() - started
        assert after == before, (before, after)
        print(f"answered {seconds:.1f} s after the kill", flush=True)
        return seconds
    finally:
        stop_broker(workspace)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
