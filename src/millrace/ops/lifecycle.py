"""An app's driver started here (`run`) or detached (`deploy`), stopped, restarted, rolled back.

`run` is `millrace run`: the app's driver in the foreground (`millrace.apps.runner.drive`).
`deploy` starts the app's driver as a process of its own (`millrace.ops.deployed`: its
own Spark application, in its own process group, its output appended to
`<workspace>/apps/<app>/app.log`), or with `--host` hands it to the workspace's host, one
Spark application for many apps (`millrace.ops.host`, reached through
`millrace.ops.host_inbox`), and records it in the registry (`millrace.ops.registry`).
`stop` sends that process SIGTERM (the host, a request to stop the one app), which the
runner answers by letting each query finish its running micro-batch, stopping the queries
and routing their dead letters (`millrace.apps.runner`); the process group is killed only
if it has not ended within the timeout. `restart` stops the app and deploys it again from
its source, with a new hash when the code changed, resuming from the checkpoint: offsets and
state. Before an app starts, `millrace.apps.state_schema` checks that its state can be carried over.
`rollback` stops the app, moves its checkpoints back to a batch (`millrace.ops.checkpoints`)
keeping a backup under `apps/<app>/backups/`, and deploys it again, so that it recomputes
the later batches.

Every start of an app's driver (`run`, `deploy`, `restart`, `rollback`) takes the app's
driver lock (`millrace.ops.driver_lock`) before it touches the checkpoint and goes once
through `check_start`: its checkpoint's files can be read, no query that ran before has lost
its checkpoint, its state can be carried over, its input streams exist. The verbs that start
a process of its own hand it the lock and its `RunOptions` (`millrace.ops.deployed`), and
the process checks nothing again. `start_over` is `--fresh`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from millrace.apps.app import App
from millrace.apps.options import RunOptions
from millrace.apps.runner import drive
from millrace.apps.state_schema import check_state
from millrace.bus.offsets import stream_offsets
from millrace.config.storage import StoragePath, move
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import AlreadyDeployedError, AppNotFoundError, LifecycleError
from millrace.ops import checkpoints, driver_cpu, driver_lock, host_inbox, registry
from millrace.ops.deployed import DEPLOYED_MODULE, DeployedRun
from millrace.ops.driver_lock import DriverLock
from millrace.ops.registry import STOP_TIMEOUT_S, AppRecord

LOCK_WAIT_S = 30.0
"""How long a restart or rollback waits for the stopped app's process to let its lock go."""

_KILLED_WAIT_S = 10.0


def check_start(workspace: Workspace, app: App, *, force: bool = False) -> None:
    """What a start of an app checks, once, before Spark: checkpoint, state, input streams.

    Raises `CheckpointCorruptError` for a log file Spark would fail on, `CheckpointMissingError`
    when a query that ran before has no checkpoint now, (unless `force`) `StateSchemaError`
    when the checkpoint holds state the code cannot carry over, and what
    `App.require_inputs` raises for an input stream the bus does not have.
    """
    checkpoints.verify(workspace, app.name)
    checkpoints.require_checkpoints(workspace, app.name, app.queries, app.tables)
    if not force:
        check_state(workspace, app.name, app.fingerprint(workspace))
    app.require_inputs(workspace)


def run(
    workspace: Workspace,
    app: App,
    options: RunOptions,
    *,
    fresh: bool = False,
    say: Callable[[str], None] = print,
) -> None:
    """Run `app`'s streaming queries in this process until they end or it is asked to stop.

    Raises `AppRunningError` when another driver runs the app, and what `check_start` raises;
    with `fresh` the app starts over (`start_over`). `say` gets the lines to print. The
    process records the CPU it uses while it runs the app (`millrace.ops.driver_cpu`).
    """
    with (
        driver_lock.acquire(workspace, app.name, "run", source=app.source),
        driver_cpu.recording(workspace, app.name),
    ):
        if fresh:
            moved = start_over(workspace, app.name)
            if moved is not None:
                say(f"starting over: the checkpoint was moved to {moved}")
        check_start(workspace, app, force=options.force)
        try:
            drive(
                workspace,
                app,
                options,
                say=say,
                on_progress=lambda: checkpoints.remember(workspace, app.name),
            )
        finally:
            checkpoints.remember(workspace, app.name)


def start_over(workspace: Workspace, name: str) -> StoragePath | None:
    """Start app `name` over on purpose (`--fresh`): its checkpoint folder goes under backups.

    Every query then starts from nothing, reading its inputs from their earliest records.
    Returns where the checkpoint went (None: it had none). Call with the driver lock held.
    """
    moved = _move_aside(workspace, name)
    checkpoints.forget(workspace, name)
    return moved


def load_streamable(source: str) -> App:
    """The app `source` names (`App.load`), checked to run as a stream, before any Spark.

    Example:
        >>> app_file = tmp_path / "distinct_users.sql"
        >>> _ = app_file.write_text("CREATE APPLICATION distinct_users; "
        ...     "CREATE INPUT TABLE clicks (u STRING) FROM STREAM('clicks') TIME ts LATENESS '5s'; "
        ...     "CREATE TABLE users AS SELECT COUNT(DISTINCT u) AS n FROM clicks [5 minutes];")
        >>> from millrace.errors import SqlError
        >>> try:
        ...     load_streamable(str(app_file))
        ... except SqlError as error:
        ...     print(error.message.replace(str(tmp_path), "<tmp>"))
        <tmp>/distinct_users.sql:1:147: COUNT(DISTINCT u) cannot run on a stream: Spark would
        keep every distinct value in its state
    """
    app = App.load(source)
    app.require_streamable()
    return app


def deploy(
    workspace: Workspace,
    source: str,
    options: RunOptions | None = None,
    *,
    fresh: bool = False,
) -> AppRecord:
    """Start the app of `source` detached, and record it: its own Spark application, or the host's.

    With `options.hosted`, the app runs in the workspace's host (started when none runs),
    unless the `deploy.isolated` setting names it.

    Raises `AlreadyDeployedError` when an app of that name is deployed and runs already
    (`AppRunningError` when its driver runs in a terminal), and what `check_start` raises.
    With `fresh`, the app starts over (`start_over`).
    """
    app = load_streamable(source)
    try:
        existing: AppRecord | None = registry.load(workspace, app.name)
    except AppNotFoundError:
        existing = None
    if existing is not None and existing.status == "running":
        raise AlreadyDeployedError(
            f"app {app.name!r} already runs (pid {existing.pid}, from {existing.source})",
            app=app.name,
            hint=f"`millrace restart {app.name}` starts it again with new code; "
            f"`millrace stop {app.name}` stops it",
        )
    options = options or RunOptions()
    with driver_lock.acquire(workspace, app.name, "deploy", source=app.source) as lock:
        if fresh:
            start_over(workspace, app.name)
        check_start(workspace, app, force=options.force)
        return _start(workspace, app, options, str(Path.cwd()), lock, "deploy")


def restart(
    workspace: Workspace,
    name: str,
    *,
    source: str | None = None,
    trigger: Trigger | None = None,
    master: str | None = None,
    fresh: bool = False,
    start_from: Literal["earliest", "latest"] | int = "earliest",
    force: bool = False,
    timeout_s: float = STOP_TIMEOUT_S,
) -> AppRecord:
    """Stop app `name` if it runs and start it again from its source (or `source`).

    The code is read again (its hash recomputed); the app resumes from its checkpoint with
    its state, unless `fresh`, which moves the checkpoint aside under `apps/<name>/backups/`
    first so the app starts over with empty state, reading its inputs from `start_from`:
    their earliest records, their end, or the first records that reached the bus at or after
    a time (epoch ms).
    `trigger` and `master` default to those it ran with.
    """
    record = registry.load(workspace, name)
    app = load_streamable(source or record.source)
    if app.name != name:
        raise LifecycleError(
            f"{app.source} holds app {app.name!r}, not {name!r}",
            hint="restart takes the app's own source; deploy another app with `millrace deploy`",
        )
    _require_no_other_driver(workspace, record)
    if not fresh:
        # Checked before stopping, so that code that cannot run leaves the app running.
        check_start(workspace, app, force=force)
    if record.status == "running":
        stop(workspace, name, timeout_s=timeout_s)
    options = dataclasses.replace(
        record.options,
        trigger=trigger or record.options.trigger,
        master=master or record.options.master,
        force=force,
    )
    with driver_lock.acquire(workspace, name, "restart", wait_s=LOCK_WAIT_S) as lock:
        if fresh:
            moved = start_over(workspace, name)
            if moved is not None and start_from != "earliest":
                checkpoints.seed_start(
                    moved,
                    workspace.app_checkpoints(name),
                    lambda stream: stream_offsets(workspace.settings, stream, start_from),
                )
            check_start(workspace, app, force=force)
        return _start(workspace, app, options, record.cwd, lock, "restart")


def stop(workspace: Workspace, name: str, *, timeout_s: float = STOP_TIMEOUT_S) -> AppRecord:
    """Stop app `name` gracefully: its running micro-batches finish, then its driver ends.

    An app's own process gets SIGTERM; if it is still there after `timeout_s`, its whole
    process group (Python and Spark's JVM) is killed, which loses nothing (the micro-batch in
    flight runs again at the next start) but takes longer to recover. An app in the host is
    asked to stop through the host's inbox, and the host's other apps go on. An app that is
    not running is left as it is.
    """
    record = registry.load(workspace, name)
    if record.status == "running" and record.options.hosted:
        _stop_in_host(workspace, record, timeout_s)
    elif record.status == "running" and record.pid is not None:
        _stop_process(record, timeout_s)
    status: registry.Status = (
        "stopped" if record.status in ("running", "stopped") else record.status
    )
    stopped = dataclasses.replace(record, status=status, stopped_at=registry.now_iso())
    registry.save(workspace, stopped)
    return stopped


def _stop_process(record: AppRecord, timeout_s: float) -> None:
    """SIGTERM to the app's own process; its process group killed if it outlives `timeout_s`."""
    assert record.pid is not None
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while registry.process_alive(record.pid, record.proc_start):
        if time.monotonic() > deadline:
            os.killpg(record.pid, signal.SIGKILL)
            # Gone in an instant; until then it holds the app's driver lock.
            deadline = time.monotonic() + _KILLED_WAIT_S
            while registry.process_alive(record.pid, record.proc_start):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            break
        time.sleep(0.2)
    _reap(record.pid)


def _stop_in_host(workspace: Workspace, record: AppRecord, timeout_s: float) -> None:
    """Ask the host to stop the app, and wait until the app's thread has let its lock go.

    Raises `LifecycleError` when it still runs after `timeout_s`: the host is not killed for
    one app, since its others run on.
    """
    host_inbox.send(workspace, host_inbox.HostRequest("stop", record.name))
    deadline = time.monotonic() + timeout_s
    while registry.process_alive(record.pid, record.proc_start):
        holder = driver_lock.holder(workspace, record.name)
        if holder is None or holder.pid != record.pid:
            return
        if time.monotonic() > deadline:
            raise LifecycleError(
                f"app {record.name!r} did not stop within {timeout_s:.0f} s in the host "
                f"(pid {record.pid})",
                hint=f"try again; its log is {record.log}, the host's {workspace.host_log}",
            )
        time.sleep(0.2)


@dataclass(frozen=True)
class RolledBack:
    """A finished rollback: what moved, where the backup is, and the app started again."""

    rollback: checkpoints.Rollback
    record: AppRecord | None


def rollback(
    workspace: Workspace,
    name: str,
    *,
    to_batch: int | None = None,
    to_time_ms: int | None = None,
    start: bool = True,
    timeout_s: float = STOP_TIMEOUT_S,
) -> RolledBack:
    """Stop app `name`, move its queries back to a batch, and (with `start`) deploy it again.

    `to_batch` names a batch id, applied to each query of the app that has committed it (a
    query with fewer batches is left as it is); `to_time_ms` picks, per query, the last batch
    committed at or before that time (none: the query starts over). What is removed is kept
    under `apps/<name>/backups/<time>-rollback/`. Log files that cannot be read are moved
    like the others: rolling back to before a corrupt file is how to get past it. An app
    that was never deployed (run in a terminal) is rolled back and left stopped.
    """
    if (to_batch is None) == (to_time_ms is None):
        raise LifecycleError(
            "rollback needs a batch or a time, and only one",
            hint="give --to-batch N or --to-time TIME",
        )
    try:
        record: AppRecord | None = registry.load(workspace, name)
    except AppNotFoundError:
        if not checkpoints.query_checkpoints(workspace, name):
            raise
        record = None  # run in a terminal, never deployed: its checkpoint is rolled back
    if record is not None:
        _require_no_other_driver(workspace, record)
    batches = checkpoints.history(workspace, name, strict=False)
    if to_batch is not None:
        last = {batch.query: batch.batch_id for batch in batches}
        targets = {query: to_batch for query, newest in last.items() if newest > to_batch}
    else:
        assert to_time_ms is not None
        targets = checkpoints.batch_at(batches, to_time_ms)
        last = {batch.query: batch.batch_id for batch in batches}
        targets = {query: n for query, n in targets.items() if last[query] > n}
    if record is not None and record.status == "running":
        stop(workspace, name, timeout_s=timeout_s)
    with driver_lock.acquire(workspace, name, "rollback", wait_s=LOCK_WAIT_S) as lock:
        # The log is read again: batches ran between the first read and the stop.
        if to_batch is not None:
            targets = {
                batch.query: to_batch
                for batch in checkpoints.history(workspace, name, strict=False)
                if batch.batch_id > to_batch
            }
        backup = _backup_dir(workspace, name, "rollback")
        done = checkpoints.rollback(workspace, name, targets, backup)
        # A query moved back to before its first batch starts over, as asked.
        checkpoints.forget(workspace, name, [q for q, n in targets.items() if n < 0])
        restarted = None
        if start and record is not None:
            app = load_streamable(record.source)
            check_start(workspace, app, force=record.options.force)
            restarted = _start(workspace, app, record.options, record.cwd, lock, "rollback")
    return RolledBack(done, restarted)


def _require_no_other_driver(workspace: Workspace, record: AppRecord) -> None:
    """Refuse to touch deployed app `record` while a driver it did not start runs it."""
    holder = driver_lock.holder(workspace, record.name)
    if holder is not None and not (record.status == "running" and holder.pid == record.pid):
        raise driver_lock.refusal(workspace, record.name)


def _start(
    workspace: Workspace,
    app: App,
    options: RunOptions,
    cwd: str | None,
    lock: DriverLock,
    started_by: driver_lock.StartedBy,
) -> AppRecord:
    """Start the app in folder `cwd`, handing it `lock`: its own process, or the host's thread.

    An app that `deploy.isolated` names gets a process of its own whatever `options` say.
    """
    options = options.for_app(app.name, workspace.settings)
    log = workspace.app_log(app.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    registry.clear_exit(workspace, app.name)
    with log.open("ab") as output:
        output.write(f"--- {registry.now_iso()} millrace run {app.source}\n".encode())
    if options.hosted:
        pid, proc_start = _start_in_host(workspace, app, options, cwd, lock, started_by)
    else:
        pid = _start_process(workspace, app, options, cwd, lock, started_by)
        proc_start = registry.process_start(pid)
    record = AppRecord(
        name=app.name,
        kind=app.kind,
        source=app.source,
        source_hash=registry.source_hash(app.source),
        checkpoint=str(workspace.app_checkpoints(app.name)),
        log=str(log),
        options=options,
        cwd=cwd,
        declared=app.declared,
        pid=pid,
        proc_start=proc_start,
        started_at=registry.now_iso(),
        status="running",
    )
    registry.save(workspace, record)
    return record


def _start_process(
    workspace: Workspace,
    app: App,
    options: RunOptions,
    cwd: str | None,
    lock: DriverLock,
    started_by: driver_lock.StartedBy,
) -> int:
    """Start the app's own driver process, which keeps `lock` for life; its pid."""
    environment = {
        **os.environ,
        **lock.handed_over(),
        **DeployedRun(app.name, app.source, options).handed_over(),
        # For the app's own code, such as a Publisher that locates the workspace.
        "MILLRACE_HOME": str(workspace.root),
        # Output goes to a file: Python must not hold it back in a buffer.
        "PYTHONUNBUFFERED": "1",
    }
    with workspace.app_log(app.name).open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", DEPLOYED_MODULE],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd or None,
            env=environment,
            start_new_session=True,
            pass_fds=(lock.descriptor,),
        )
    lock.describe(process.pid, started_by, app.source)
    return process.pid


def _start_in_host(
    workspace: Workspace,
    app: App,
    options: RunOptions,
    cwd: str | None,
    lock: DriverLock,
    started_by: driver_lock.StartedBy,
) -> tuple[int, int | None]:
    """Hand the app to the workspace's host (started if none runs); the host's pid and start.

    The host's thread for the app takes the app's driver lock, which this lets go once the
    request is in the inbox; it returns once the host holds the lock, so that what follows
    (`ps`, a second deploy) sees the app running. An app that could not start in the host
    raises `LifecycleError` with the end of its log.
    """
    master = options.on_master(workspace).settings.spark_master
    host = host_inbox.start_host(workspace, master)
    host_inbox.send(
        workspace, host_inbox.HostRequest("start", app.name, app.source, options, cwd, started_by)
    )
    lock.release()
    deadline = time.monotonic() + host_inbox.HOST_START_WAIT_S
    while time.monotonic() < deadline:
        holder = driver_lock.holder(workspace, app.name)
        if holder is not None and holder.pid == host.pid:
            return host.pid, host.proc_start
        if workspace.app_exit(app.name).is_file():
            break
        if host_inbox.running_host(workspace) is None:
            break
        time.sleep(0.1)
    log = workspace.app_log(app.name)
    ending = log.read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
    raise LifecycleError(
        f"app {app.name!r} did not start in the host (pid {host.pid}): " + " / ".join(ending),
        hint=f"its log is {log}; the host's is {workspace.host_log}",
    )


def _move_aside(workspace: Workspace, name: str) -> StoragePath | None:
    checkpoint = workspace.app_checkpoints(name)
    if not checkpoint.exists():
        return None
    target = _backup_dir(workspace, name, "fresh")
    move(checkpoint, target)
    return target


def _backup_dir(workspace: Workspace, name: str, why: str) -> StoragePath:
    """A new folder under the app's backups (`Workspace.backups`), named by the time and why."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return workspace.backups(name) / f"{stamp}-{why}"


def _reap(pid: int) -> None:
    """Collect the exit of `pid` when this process started it, so it leaves no zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
