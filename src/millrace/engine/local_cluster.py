"""A local Spark standalone cluster: a master and N workers on loopback, from PySpark's install.

`millrace up --spark-workers N` calls `start_cluster`, `millrace down` calls `stop_cluster`,
`millrace status` calls `cluster_status`, as they do for the Kafka broker and Redis. The
master and workers are Spark's own (`spark-class org.apache.spark.deploy.master.Master` and
`...worker.Worker`, from the jars PySpark installs), detached, so they outlive the command;
their record (`cluster.json`: pids, URL, UI port), logs and the workers' work folders live in
`<workspace>/spark/`. Each worker offers `spark.worker_cores` cores and `spark.worker_memory`
to the apps that run on the master's URL (`--master spark://127.0.0.1:<spark.cluster_port>`).
On one machine the workers share its cores: the cluster is for trying what a cluster does
(a worker lost, tasks retried, state reloaded), not for more speed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from millrace.config.local_processes import live_command_line, loopback_port_is_free, stop_process
from millrace.config.workspace import Workspace
from millrace.errors import EngineError

# Found, not imported: `millrace status` and `down` must not pay for loading PySpark.
_SPARK_HOME = Path(importlib.util.find_spec("pyspark").origin or "").parent  # type: ignore[union-attr]
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_START_TIMEOUT_S = 120.0
_STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class ClusterStatus:
    """The workspace's local cluster as `millrace status` shows it.

    Example:
        >>> ClusterStatus("spark://127.0.0.1:7077", 8080, 101, [102, 103]).summary()
        'spark://127.0.0.1:7077: a master (pid 101) and 2 workers (pids 102, 103)'
    """

    url: str
    ui_port: int
    master_pid: int
    worker_pids: list[int] = field(default_factory=list)

    def summary(self) -> str:
        """One line: the master's URL and pids."""
        workers = ", ".join(str(pid) for pid in self.worker_pids)
        count = len(self.worker_pids)
        noun = "worker" if count == 1 else "workers"
        return f"{self.url}: a master (pid {self.master_pid}) and {count} {noun} (pids {workers})"


def start_cluster(workspace: Workspace, workers: int) -> ClusterStatus:
    """Start a master and `workers` workers, and wait until every worker has registered.

    Starts nothing when the workspace's cluster runs already. Raises `EngineError` when the
    master's port is taken, or the cluster is not up in 2 minutes (with the end of its logs).
    """
    current = cluster_status(workspace)
    if current is not None:
        return current
    settings = workspace.settings
    port = settings.spark_cluster_port
    if not loopback_port_is_free(port):
        raise EngineError(
            f"port {port} on 127.0.0.1 is in use by another process, so the local Spark "
            "master cannot listen there; no cluster was started",
            hint="stop that process, or choose a free port with spark.cluster_port in "
            "millrace.toml (or MILLRACE_SPARK_CLUSTER_PORT)",
        )
    root = workspace.spark_cluster_dir
    root.mkdir(parents=True, exist_ok=True)
    url, ui_port = f"spark://127.0.0.1:{port}", _free_port()
    master = _spawn(
        root / "master.log",
        _MASTER_CLASS,
        ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)],
    )
    worker_pids = [
        _spawn(
            root / f"worker-{number}.log",
            _WORKER_CLASS,
            [
                "--host",
                "127.0.0.1",
                "--cores",
                str(settings.spark_worker_cores),
                "--memory",
                settings.spark_worker_memory,
                "--webui-port",
                "0",
                "--work-dir",
                str(root / f"worker-{number}"),
                url,
            ],
        )
        for number in range(1, workers + 1)
    ]
    status = ClusterStatus(url, ui_port, master, worker_pids)
    (root / "cluster.json").write_text(json.dumps(asdict(status)))
    deadline = time.monotonic() + _START_TIMEOUT_S
    while alive_workers(status) < workers:
        if time.monotonic() > deadline:
            stop_cluster(workspace)
            raise EngineError(
                f"the local Spark cluster did not have its {workers} workers registered with "
                f"the master within {_START_TIMEOUT_S:.0f} s; the end of the master's log "
                f"({root / 'master.log'}):\n{_tail(root / 'master.log')}",
                hint="fix what the log names, then run `millrace up --spark-workers N` again",
            )
        time.sleep(1.0)
    return status


def stop_cluster(workspace: Workspace) -> ClusterStatus | None:
    """Stop the workspace's cluster, workers first; what ran, or None. Safe to repeat."""
    status = _recorded(workspace)
    if status is not None:
        for pid in [*status.worker_pids, status.master_pid]:
            if _is_spark_daemon(pid):
                stop_process(pid, _STOP_GRACE_S)
    (workspace.spark_cluster_dir / "cluster.json").unlink(missing_ok=True)
    return status


def cluster_status(workspace: Workspace) -> ClusterStatus | None:
    """The workspace's cluster if its master runs, with the workers still alive; else None."""
    status = _recorded(workspace)
    if status is None or not _is_spark_daemon(status.master_pid):
        return None
    return ClusterStatus(
        status.url,
        status.ui_port,
        status.master_pid,
        [pid for pid in status.worker_pids if _is_spark_daemon(pid)],
    )


def alive_workers(status: ClusterStatus) -> int:
    """The workers the master counts as alive now (0 when its UI does not answer)."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{status.ui_port}/json/", timeout=5
        ) as answer:
            state = json.load(answer)
    except (OSError, ValueError):
        return 0
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


def _spawn(log: Path, main_class: str, arguments: list[str]) -> int:
    environment = {**os.environ, "SPARK_HOME": str(_SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    with log.open("ab") as output:
        process = subprocess.Popen(
            [str(_SPARK_HOME / "bin" / "spark-class"), main_class, *arguments],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )
    return process.pid


def _recorded(workspace: Workspace) -> ClusterStatus | None:
    try:
        recorded = json.loads((workspace.spark_cluster_dir / "cluster.json").read_text())
        return ClusterStatus(**recorded)
    except (OSError, ValueError, TypeError):
        return None


def _is_spark_daemon(pid: int) -> bool:
    # `spark-class` execs java: the pid is the JVM's, its command line naming the class.
    command_line = live_command_line(pid) or b""
    return b"org.apache.spark.deploy." in command_line


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join(lines[-25:]) or "(it wrote nothing)"
