"""Fixtures of the CLI tests: `millrace` commands run in the test's own process, or each in a
process of its own.

`millrace` runs a command through the CLI's entry point (`millrace.cli.main.main`, which
renders errors and sets the exit status) in this process, with click's `CliRunner` giving it
its own stdin, stdout, stderr and environment variables for the call: no new interpreter to
start and load. It is for verbs that talk to the bus, Redis or the workspace's files, and
for those that run Spark (`check`, `run`, `table create --from-stream`, `archive`,
`backfill`, `sql`): they run on the suite's session, which they leave running, as they would
a notebook's (`millrace.engine.session.command_session`), and start no JVM.

`millrace_subprocess` starts `python -m millrace.cli.main` for what needs a process of its
own: a run that is killed or signalled, or whose terminal output a test reads as a user sees
it (the JVM's lines too); a run on other Spark settings than the suite's (another master,
S3A or HDFS storage); verbs that start or signal detached apps (`deploy`, `restart`,
`rollback`, `stop`), or that set up logging or a server (`serve`, `monitor`).

Both return what a finished process gives: its exit status, stdout and stderr.
"""

import io
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from click.testing import CliRunner

from millrace.cli.main import main
from tests.jvm_options import CHILD_JVM_OPTIONS

Millrace = Callable[..., subprocess.CompletedProcess[str]]


class _Pipe(io.BytesIO):
    """Input piped to a command: named and unseekable, as a process's stdin then is."""

    name = "<stdin>"

    def seekable(self) -> bool:
        return False


def _in_this_process(
    *arguments: str, stdin: str | None = None, environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = ["millrace", *arguments]
    with (
        CliRunner().isolation(
            input=_Pipe((stdin or "").encode()),
            env={CHILD_JVM_OPTIONS: None, **(environment or {})},
        ) as (
            stdout,
            stderr,
            _,
        ),
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(sys, "argv", command)
        try:
            main()
            status = 0
        except SystemExit as exit_:
            status = 0 if exit_.code is None else int(exit_.code)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return subprocess.CompletedProcess(
            command, status, stdout.getvalue().decode(), stderr.getvalue().decode()
        )


def _in_a_process_of_its_own(
    *arguments: str, stdin: str | None = None, environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "millrace.cli.main", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(environment or {})},
    )


@pytest.fixture(scope="session")
def millrace() -> Millrace:
    """`millrace(*arguments, stdin=None, environment=None)`: the command, run in this process.

    `environment` adds to and overrides this process's environment variables for the call.
    """
    return _in_this_process


@pytest.fixture(scope="session")
def millrace_subprocess() -> Millrace:
    """`millrace_subprocess(*arguments, stdin=None, environment=None)`: the command, run by a
    new Python process (`python -m millrace.cli.main`)."""
    return _in_a_process_of_its_own
