"""An S3 stand-in on loopback, for the tests of a storage root under `s3a://`.

S3 is outside the machine, so a stand-in is allowed: `s3_stand_in` starts moto's server
(`python -m moto.server`, pinned in pyproject.toml) on a free loopback port once per test
module, makes a bucket in it, and gives the `MILLRACE_*` variables that put a workspace's
storage root there, with an access key and a secret key as a user sets them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyarrow import fs as pafs

from tests.ports import free_port

_START_S = 60.0
"""How long moto's server may take to accept connections."""


@dataclass(frozen=True)
class S3StandIn:
    """moto's S3 server on loopback, a bucket in it, and the keys to log in with."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str

    def environment(self, prefix: str) -> dict[str, str]:
        """The variables that put a workspace's storage root under `s3a://bucket/prefix`."""
        return {
            "MILLRACE_STORAGE_ROOT": f"s3a://{self.bucket}/{prefix}",
            "MILLRACE_S3_ENDPOINT": self.endpoint,
            "MILLRACE_S3_ACCESS_KEY": self.access_key,
            "MILLRACE_S3_SECRET_KEY": self.secret_key,
        }

    def uri(self, prefix: str) -> str:
        """The storage root `environment(prefix)` names."""
        return f"s3a://{self.bucket}/{prefix}"

    def stored(self, folder: str) -> list[str]:
        """The files stored under `folder` (below the bucket), relative to it, sorted."""
        return [key.removeprefix(f"{self.bucket}/{folder}/") for key in self.keys(folder)]

    def keys(self, prefix: str) -> list[str]:
        """The keys of the objects stored under `prefix`, sorted, read with moto's own view."""
        folder = f"{self.bucket}/{prefix}"
        selector = pafs.FileSelector(folder, allow_not_found=True, recursive=True)
        found = self.filesystem().get_file_info(selector)
        return sorted(info.path for info in found if info.type == pafs.FileType.File)

    def filesystem(self) -> pafs.S3FileSystem:
        """A client of the stand-in, made independently of millrace's storage module."""
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        )


@pytest.fixture(scope="module")
def s3_stand_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3StandIn]:
    """moto's S3 server on a free loopback port with one bucket; stopped after the module."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_port(port, server, log)
        stand_in = S3StandIn(
            endpoint=f"http://127.0.0.1:{port}",
            bucket=f"millrace-{uuid.uuid4().hex[:8]}",
            access_key="test-access-key",
            secret_key=f"secret-{uuid.uuid4().hex}",
        )
        stand_in.filesystem().create_dir(stand_in.bucket)
        yield stand_in
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_for_port(port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_S
    while True:
        assert server.poll() is None, f"moto's server stopped: {log.read_text()}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, f"moto's server did not start: {log.read_text()}"
            time.sleep(0.2)
