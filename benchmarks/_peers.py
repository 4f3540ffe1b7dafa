"""The peers: stream processors other than millrace that a benchmark runs beside its sides.

Each peer runs from a virtualenv of its own, benchmarks/.venv-<name>, that
`bash benchmarks/setup_peers.sh` creates (their pins clash with the project's), as a
subprocess running a job script benchmarks/peers/<name>_<job>.py that takes its settings as
one JSON argument and prints JSON lines. A job that ends by itself (`run_peer`) prints its
report last; a job that runs until it is stopped (`start_peer`) prints `{"settings": ...}`
once it runs, and is stopped with its process group, Flink's JVM and Python workers included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PEERS = {"pyflink": "flink", "quix_streams": "quix"}
"""Each peer's name in benchmarks/.venv-<name> and benchmarks/peers/<name>_<job>.py."""
FLINK_KAFKA_CONNECTOR = "5.0.0-2.2"
"""The version of flink-sql-connector-kafka that benchmarks/setup_peers.sh fetches."""
_START_TIMEOUT_S = 300
_STOP_TIMEOUT_S = 30
_BENCHMARKS = Path(__file__).parent


def run_peer(peer: str, job: str, settings: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Run `peer`'s `job` to its end: its wall-clock seconds and its report (its last line)."""
    started = time.perf_counter()
    finished = subprocess.run(
        _command(peer, job, settings), capture_output=True, text=True, check=False
    )
    wall_s = time.perf_counter() - started
    if finished.returncode != 0:
        raise SystemExit(f"{peer} failed (exit {finished.returncode}):\n{finished.stderr[-4000:]}")
    return wall_s, json.loads(finished.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class RunningPeer:
    """A peer's job running until stopped: its process and the settings it said it runs with."""

    peer: str
    process: subprocess.Popen
    settings: dict[str, Any]

    def stop(self) -> None:
        """Stop the job's whole process group: SIGTERM, then SIGKILL if it is still there."""
        _stop_group(self.process)


def start_peer(peer: str, job: str, settings: dict[str, Any]) -> RunningPeer:
    """Start `peer`'s `job` in a process group of its own; return once it says it runs."""
    log = Path(tempfile.mkdtemp(prefix=f"bench-{PEERS[peer]}-{job}-")) / "output.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            _command(peer, job, settings),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + _START_TIMEOUT_S
    while (said := _said_settings(log)) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_group(process)
            tail = log.read_text(errors="replace")[-4000:]
            raise SystemExit(f"{peer} {job} did not start (exit {process.returncode}):\n{tail}")
        time.sleep(0.2)
    return RunningPeer(peer, process, said)


def _said_settings(log: Path) -> dict[str, Any] | None:
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith('{"settings"'):
            return json.loads(line)["settings"]
    return None


def _stop_group(process: subprocess.Popen) -> None:
    for stopping in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, stopping)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _command(peer: str, job: str, settings: dict[str, Any]) -> list[str]:
    name = PEERS[peer]
    python = _BENCHMARKS / f".venv-{name}" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{peer}: {python} is missing: run `bash benchmarks/setup_peers.sh`")
    script = _BENCHMARKS / "peers" / f"{name}_{job}.py"
    return [str(python), str(script), json.dumps(settings)]
