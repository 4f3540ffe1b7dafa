"""A workspace whose local servers want a login, for the tests of secured Kafka and Redis.

`SecuredWorkspace.millrace` runs a `millrace` command in a process of its own against the
workspace and keeps what it printed, so that a test can look for the password in everything
its commands wrote, in the workspace's files and in the machine's command lines. The fixtures
that start the servers are `tests.bus.secured_bus` and `tests.serving.secured_redis`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from millrace.config.workspace import Workspace


@dataclass
class SecuredWorkspace:
    """A workspace whose servers want a login, the variables that point a process at it, and
    what its commands printed."""

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
