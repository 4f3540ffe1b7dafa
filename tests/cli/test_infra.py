"""`millrace up` and `down`: a local Spark cluster beside the broker and Redis; and when the
serving store cannot start, nothing is left half up."""

import os
import re
import socket
import subprocess
import sys
from dataclasses import replace

from millrace.bus.broker import broker_status, stop_broker
from millrace.config.local_processes import live_command_line
from millrace.config.workspace import Workspace
from millrace.engine.local_cluster import cluster_status
from tests.ports import free_port


def millrace(workspace: Workspace, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`millrace ARGUMENTS` in `workspace`, on its own ports."""
    settings = workspace.settings
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("MILLRACE_KAFKA", "MILLRACE_REDIS")
    }
    environment |= {
        "MILLRACE_HOME": str(workspace.root),
        "MILLRACE_KAFKA_PORT": str(settings.kafka_port),
        "MILLRACE_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "MILLRACE_REDIS_PORT": str(settings.redis_port),
        "MILLRACE_SPARK_CLUSTER_PORT": str(settings.spark_cluster_port),
    }
    return subprocess.run(
        [sys.executable, "-m", "millrace.cli.main", *arguments],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=300,
    )


def test_up_with_the_redis_port_taken_starts_nothing(fresh_workspace: Workspace) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", fresh_workspace.settings.redis_port))
        taken.listen()
        try:
            result = millrace(fresh_workspace, "up")
            left_running = broker_status(fresh_workspace).running
        finally:
            stop_broker(fresh_workspace)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"error[serving]: port {fresh_workspace.settings.redis_port} on 127.0.0.1 is in use"
    )
    assert "nothing was started" in result.stderr and "MILLRACE_REDIS_PORT" in result.stderr
    assert "Traceback" not in result.stderr
    assert not left_running and "bus:" not in result.stdout


def test_up_stops_the_broker_it_started_when_redis_then_fails(fresh_workspace: Workspace) -> None:
    # A snapshot Redis cannot load makes redis-server exit while starting.
    fresh_workspace.redis_dir.mkdir(parents=True)
    (fresh_workspace.redis_dir / "dump.rdb").write_bytes(b"REDIS0011 not a snapshot")
    try:
        result = millrace(fresh_workspace, "up")
        left_running = broker_status(fresh_workspace).running
    finally:
        stop_broker(fresh_workspace)  # whatever the outcome, no broker outlives the test
    assert result.returncode == 1, result.stdout
    started = re.search(r"bus: Kafka broker started, .*\(pid (\d+),", result.stdout)
    assert started is not None, result.stdout
    assert result.stderr.startswith("error[serving]: redis-server exited")
    assert (
        f"the Kafka broker this command started (pid {started[1]}) was stopped again; "
        "nothing is left running"
    ) in result.stderr
    assert not left_running
    assert live_command_line(int(started[1])) is None


def test_up_with_spark_workers_starts_a_local_cluster_that_status_shows_and_down_stops(
    fresh_workspace: Workspace,
) -> None:
    settings = replace(fresh_workspace.settings, spark_cluster_port=free_port())
    workspace = replace(fresh_workspace, settings=settings)
    try:
        started = millrace(workspace, "up", "--spark-workers", "2")
        shown = millrace(workspace, "status")
    finally:
        stopped = millrace(workspace, "down")
    url = f"spark://127.0.0.1:{settings.spark_cluster_port}"
    assert started.returncode == 0, started.stderr
    line = re.search(
        rf"spark: local cluster running, {url}: .*\(pids (\d+), (\d+)\)", started.stdout
    )
    assert line is not None, started.stdout
    assert f"spark: local cluster running, {url}" in shown.stdout
    assert f"spark: local cluster stopped (was {url}" in stopped.stdout
    assert all(live_command_line(int(pid)) is None for pid in line.groups())
    assert cluster_status(workspace) is None
