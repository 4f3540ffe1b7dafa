"""The secured bus of the bus tests: a workspace whose local broker listens on SASL_SSL only.

`secured_bus` starts, once per test module that uses it, a broker of its own (free ports, a
workspace of its own) whose only client listener is SASL_SSL with a SCRAM-SHA-512 user; its
password is read from a file, as a production setup keeps it. `SecuredBus.millrace` runs a
`millrace` command in a process of its own against it and keeps what the command printed, so
a test can look for the password in everything the module's commands wrote.
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

from millrace.bus.broker import start_broker, stop_broker
from millrace.config.workspace import Workspace, init_workspace
from tests.ports import free_port


@dataclass
class SecuredBus:
    """A workspace with a SASL_SSL broker, the variables that point a process at it, and what
    its commands printed."""

    workspace: Workspace
    environment: dict[str, str]
    password: str
    printed: list[str] = field(default_factory=list)

    def millrace(
        self, *arguments: str, stdin: str | None = None, environment: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`millrace ARGUMENTS` in a process of its own, its variables overridden by
        `environment`; what it printed is kept in `printed`."""
        ran = subprocess.run(
            [sys.executable, "-m", "millrace.cli.main", *arguments],
            input=stdin,
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

    def command_lines_holding_password(self) -> list[str]:
        """The command lines of this machine's processes (what `ps` shows) holding it."""
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                line = cmdline.read_bytes()
            except OSError:
                continue  # the process ended meanwhile
            if self.password.encode() in line:
                found.append(line.replace(b"\0", b" ").decode(errors="replace"))
        return found


@pytest.fixture(scope="module")
def secured_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBus]:
    """A broker listening on SASL_SSL only (SCRAM-SHA-512, password in a file), in a workspace
    of its own; stopped when the module's tests are done."""
    root = tmp_path_factory.mktemp("secured")
    password = f"pw-{uuid.uuid4().hex}"
    password_file = root / "kafka-password"
    password_file.write_text(password + "\n")
    environment = {
        "MILLRACE_HOME": str(root / "workspace"),
        "MILLRACE_KAFKA": "",
        "MILLRACE_KAFKA_PORT": str(free_port()),
        "MILLRACE_KAFKA_CONTROLLER_PORT": str(free_port()),
        "MILLRACE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MILLRACE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "MILLRACE_KAFKA_USER": "millrace",
        "MILLRACE_KAFKA_PASSWORD": "",
        "MILLRACE_KAFKA_PASSWORD_FILE": str(password_file),
        "MILLRACE_REDIS": "",
        "MILLRACE_REDIS_PORT": str(free_port()),
        "MILLRACE_SPARK_MASTER": "local[2]",
        "MILLRACE_SPARK_SHUFFLE_PARTITIONS": "2",
    }
    workspace = Workspace.locate({**os.environ, **environment})
    init_workspace(workspace)
    start_broker(workspace)
    yield SecuredBus(workspace, environment, password)
    stop_broker(workspace)
