"""The password-protected Redis of the serving tests: millrace's local Redis with an ACL user.

`secured_redis` starts, once per test module that uses it, a workspace of its own whose local
Redis (`millrace up`'s) lets in only the ACL user `feeder`, whose password is read from a file;
its streams are the suite's broker's. `SecuredRedis.millrace` runs a `millrace` command in a
process of its own against it and keeps what it printed, so a test can look for the password.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from millrace.config.workspace import Workspace, init_workspace
from millrace.serving.server import start_redis, stop_redis
from tests.ports import free_port


@dataclass
class SecuredRedis:
    """A workspace whose local Redis wants a login, the variables that point a process at it,
    and what its commands printed."""

    workspace: Workspace
    environment: dict[str, str]
    password: str
    printed: list[str] = field(default_factory=list)

    def millrace(
        self, *arguments: str, environment: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`millrace ARGUMENTS` in a process of its own, its variables overridden by
        `environment`; what it printed is kept in `printed`."""
        ran = subprocess.run(
            [sys.executable, "-m", "millrace.cli.main", *arguments],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **self.environment, **(environment or {})},
            timeout=300,
        )
        self.printed += [ran.stdout, ran.stderr]
        return ran

    def files_holding_password(self) -> list[Path]:
        """The files of the workspace whose bytes hold the password."""
        needle = self.password.encode()
        return sorted(
            path
            for path in self.workspace.root.rglob("*")
            if path.is_file() and needle in path.read_bytes()
        )


@pytest.fixture(scope="module")
def secured_redis(
    tmp_path_factory: pytest.TempPathFactory, workspace: Workspace
) -> Iterator[SecuredRedis]:
    """A local Redis that only ACL user `feeder` may use (password in a file), in a workspace of
    its own on the suite's broker; stopped when the module's tests are done."""
    root = tmp_path_factory.mktemp("secured-redis")
    password = f"pw-{uuid.uuid4().hex}"
    password_file = root / "redis-password"
    password_file.write_text(password + "\n")
    environment = {
        "MILLRACE_HOME": str(root / "workspace"),
        "MILLRACE_KAFKA": workspace.settings.bootstrap_servers,
        "MILLRACE_REDIS": "",
        "MILLRACE_REDIS_PORT": str(free_port()),
        "MILLRACE_REDIS_USER": "feeder",
        "MILLRACE_REDIS_PASSWORD": "",
        "MILLRACE_REDIS_PASSWORD_FILE": str(password_file),
        "MILLRACE_SPARK_MASTER": "local[2]",
        "MILLRACE_SPARK_SHUFFLE_PARTITIONS": "2",
    }
    secured = Workspace.locate({**os.environ, **environment})
    init_workspace(secured)
    start_redis(secured)
    yield SecuredRedis(secured, environment, password)
    stop_redis(secured)
