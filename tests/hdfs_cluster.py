"""A real HDFS on loopback, for the tests of a storage root under `hdfs://`.

`hdfs_cluster` starts Hadoop's MiniDFSCluster (a NameNode and one DataNode, jars resolved
by scripts/setup.sh from jvm/hdfs-minicluster) once per test module, in a JVM of its own,
through the main class Hadoop ships for it (`MiniHadoopClusterManager`, without YARN). Every
server of it listens on 127.0.0.1; the NameNode's RPC port is a free one.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hdfs_native import Client

from millrace.config.jvm import jars, java_executable
from millrace.config.settings import Settings
from tests.jvm_options import CHILD_JVM_TIERED
from tests.ports import free_port

_START_S = 120.0
"""How long the NameNode and DataNode may take to start and report ready."""

_MAIN = "org.apache.hadoop.mapreduce.MiniHadoopClusterManager"


@dataclass(frozen=True)
class HdfsCluster:
    """A NameNode on loopback and the client to look at its files independently of millrace."""

    url: str
    """`hdfs://127.0.0.1:PORT`, the NameNode's RPC address."""

    def environment(self, prefix: str) -> dict[str, str]:
        """The variables that put a workspace's storage root under `hdfs://.../prefix`."""
        return {"MILLRACE_STORAGE_ROOT": f"{self.url}/{prefix}"}

    def uri(self, prefix: str) -> str:
        """The storage root `environment(prefix)` names."""
        return f"{self.url}/{prefix}"

    def stored(self, folder: str) -> list[str]:
        """The files stored under `/folder`, relative to it, sorted."""
        return [path.removeprefix(f"/{folder}/") for path in self.files(folder)]

    def files(self, prefix: str) -> list[str]:
        """The paths of the files stored under `/prefix`, sorted, read with hdfs-native."""
        found = Client(self.url).list_status(f"/{prefix}", recursive=True)
        return sorted(status.path for status in found if not status.isdir)


@pytest.fixture(scope="module")
def hdfs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HdfsCluster]:
    """A formatted HDFS with one DataNode, its NameNode on a free loopback port; stopped after
    the module."""
    folder = tmp_path_factory.mktemp("hdfs")
    port = free_port()
    details = folder / "details.json"
    log = folder / "cluster.log"
    classpath = ":".join(str(jar) for jar in jars(Settings(), "hdfs"))
    command = [
        java_executable(), CHILD_JVM_TIERED, "-Xmx512m", "-cp", classpath, _MAIN,
        "-nomr", "-format", "-datanodes", "1", "-nnport", str(port), "-writeDetails", str(details),
        "-D", f"hdfs.minidfs.basedir={folder / 'data'}",
    ]  # fmt: skip
    with log.open("w") as output:
        cluster = subprocess.Popen(
            command, cwd=folder, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        _wait_until_ready(details, cluster, log)
        yield HdfsCluster(f"hdfs://127.0.0.1:{port}")
    finally:
        cluster.terminate()
        cluster.wait(timeout=30)


def _wait_until_ready(details: Path, cluster: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for the details file, which the main class writes once the DataNode is up."""
    deadline = time.monotonic() + _START_S
    while not _written(details):
        assert cluster.poll() is None, f"MiniDFSCluster stopped: {log.read_text()}"
        assert time.monotonic() < deadline, f"MiniDFSCluster did not start: {log.read_text()}"
        time.sleep(0.2)


def _written(details: Path) -> bool:
    try:
        return "namenode_port" in json.loads(details.read_text())
    except (FileNotFoundError, ValueError):
        return False  # not there yet, or half written
