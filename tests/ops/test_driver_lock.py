"""One driver per app: the lock a driver holds for its lifetime, without Spark.

The lock is the kernel's (`flock`), so these run real processes: a second taker is refused
with the holder's pid and verb, a holder killed with SIGKILL leaves nothing to clean up, and
`deploy`'s hand-over leaves the lock with the process it starts.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from millrace.config.workspace import Workspace
from millrace.errors import AppRunningError
from millrace.ops import driver_lock

HOLD = """
import sys, time
from millrace.config.workspace import Workspace
from millrace.ops import driver_lock
workspace = Workspace.locate()
lock = driver_lock.{take}
print("held", flush=True)
time.sleep(600)
"""


def _holding(workspace: Workspace, take: str, **popen: object) -> subprocess.Popen[str]:
    """A process that takes `app`'s lock with `driver_lock.<take>` and sleeps, once it holds it."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(take=take)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "MILLRACE_HOME": str(workspace.root), **popen.pop("env", {})},
        **popen,
    )
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    return process


def _kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


def test_a_second_driver_is_refused_with_the_first_ones_pid_and_verb(
    fresh_workspace: Workspace,
) -> None:
    first = driver_lock.acquire(fresh_workspace, "app", "run", source="/apps/app.sql")
    with pytest.raises(AppRunningError) as refused:
        driver_lock.acquire(fresh_workspace, "app", "deploy")
    message = refused.value.render()
    assert f"app 'app' is running already: pid {os.getpid()} on " in message
    assert "started by `millrace run` at " in message
    assert "Ctrl-C in its terminal" in message
    assert driver_lock.holder(fresh_workspace, "app").pid == os.getpid()
    # Another app has a lock of its own.
    driver_lock.acquire(fresh_workspace, "other", "run").release()

    first.release()
    assert driver_lock.holder(fresh_workspace, "app") is None
    driver_lock.acquire(fresh_workspace, "app", "deploy").release()


def test_a_driver_killed_without_cleaning_up_leaves_no_lock_to_break(
    fresh_workspace: Workspace,
) -> None:
    holding = _holding(fresh_workspace, 'acquire(workspace, "app", "run")')
    try:
        assert driver_lock.holder(fresh_workspace, "app").pid == holding.pid
        with pytest.raises(AppRunningError, match=f"pid {holding.pid} on "):
            driver_lock.acquire(fresh_workspace, "app", "run")
    finally:
        _kill(holding)
    # Its description stays behind, naming a dead process; the lock went with the process.
    assert f'"pid": {holding.pid}' in (fresh_workspace.driver_holder("app")).read_text()
    assert driver_lock.holder(fresh_workspace, "app") is None
    with driver_lock.acquire(fresh_workspace, "app", "run"):
        assert driver_lock.holder(fresh_workspace, "app").pid == os.getpid()


def test_deploy_hands_its_lock_to_the_process_it_starts(fresh_workspace: Workspace) -> None:
    lock = driver_lock.acquire(fresh_workspace, "app", "deploy")
    try:
        child = _holding(
            fresh_workspace,
            'hold(workspace, "app")',
            pass_fds=(lock.descriptor,),
            env=lock.handed_over(),
        )
        lock.describe(child.pid, "deploy", "/apps/app.sql")
    finally:
        lock.release()
    try:
        # The deploying process let its copy go: the started process holds the lock alone.
        with pytest.raises(AppRunningError) as refused:
            driver_lock.acquire(fresh_workspace, "app", "run")
        assert f"pid {child.pid} on " in refused.value.message
        assert "`millrace deploy`" in refused.value.message
        assert "`millrace stop app`" in refused.value.hint
    finally:
        _kill(child)
    driver_lock.acquire(fresh_workspace, "app", "run").release()


def test_a_lock_handed_over_for_another_file_is_not_taken_for_the_apps(
    fresh_workspace: Workspace, tmp_path: Path
) -> None:
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    os.environ[driver_lock.LOCK_FD_ENV] = str(other)
    try:
        lock = driver_lock.hold(fresh_workspace, "app")
    finally:
        os.environ.pop(driver_lock.LOCK_FD_ENV, None)
        os.close(other)
    assert lock.descriptor != other
    assert driver_lock.holder(fresh_workspace, "app").started_by == "run"
    lock.release()
