"""The kill -9 structure shared by the processor failure tests: run, kill mid-stream, restart.

The app runs as `millrace run file.py:Class` does for a user, in a process group of its own,
killed whole (Python and Spark's JVM) with SIGKILL while it works, then started again with
`--available-now`, which processes what is left and stops.
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from millrace.bus.reader import TailStart, tail
from millrace.config.workspace import Workspace
from millrace.records import Record


def read(workspace: Workspace, stream: str) -> list[Record]:
    return list(tail(stream, TailStart(from_beginning=True), settings=workspace.settings))


def run_killed_and_restarted(
    workspace: Workspace,
    module: Path,
    processor: str,
    *,
    watched_output: str,
    while_running: Callable[[], None],
    after_kill: Callable[[], None] = lambda: None,
) -> None:
    """Run `module:processor` until `watched_output` gets a production, call `while_running`,
    kill the app with SIGKILL a second later, call `after_kill`, and run it again to the end."""
    command = [sys.executable, "-m", "millrace.cli.main", "run", f"{module}:{processor}"]
    app = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ,
        start_new_session=True,
    )
    try:
        # Generous: the machine running the suite may be busy, and Spark starts slowly.
        deadline = time.monotonic() + 360
        while not read(workspace, watched_output):
            assert app.poll() is None, "the app stopped by itself"
            assert time.monotonic() < deadline, "no production within 6 minutes"
            time.sleep(0.25)
        while_running()
        time.sleep(1.0)
    finally:
        os.killpg(app.pid, signal.SIGKILL)
        app.wait()
    after_kill()
    restarted = subprocess.run(
        [*command, "--available-now"], capture_output=True, text=True, env=os.environ, check=False
    )
    assert restarted.returncode == 0, restarted.stderr


def unique_values(records: list[Record]) -> list[dict]:
    """The values of `records` with the copies of an id dropped, as a millrace reader does.

    A micro-batch the kill interrupted runs again and writes the same ids and values.
    """
    by_id: dict[str, dict] = {}
    for record in records:
        assert by_id.setdefault(record.id, record.value) == record.value
    return list(by_id.values())
