"""The host: one Spark application that runs many deployed apps, each in a pool of its own.

Four apps in four Spark applications pay four times for a JVM, its JIT and garbage collector,
a micro-batch loop's threads, Kafka clients and Python workers; on two cores that, not their
records, kept the demo's machine busy. The host is how Spark runs many small streams
cheaply (Flink's session cluster does the same for jobs): `millrace deploy` starts
it when none runs (`millrace.ops.host_inbox.start_host`) and hands it the app through its
inbox; `stop`, `restart` and `rollback` act on that app alone, and the others go on.

Each app runs on a thread of its own, on a session of its own (`app_session`: its own SQL
configuration, views, functions and query listeners) whose jobs run in a FAIR scheduler pool
named after the app, with its own checkpoints and driver lock (`millrace.ops.driver_lock`),
which its thread takes when it starts the app and lets go once the app has ended and its
exit is recorded. The app's lines go to its own log (`apps/<app>/app.log`), as a deployed
app's do; the apps' logs and the host's are rotated by size (`millrace.ops.app_logs`); an
app that fails (its query raises, a bad record under a strict policy) stops alone, with its
error in its log and its exit recorded (`registry.record_exit`), which `ps` reads.

What each app costs is recorded as an own driver's is (`millrace.ops.driver_cpu.recording_host`):
its own CPU (its thread here, and in the JVM its pool's tasks and its micro-batch loops,
`Host.own_cpu_s`), with its part of what the apps share.

Each app runs its own code: its modules are imported afresh when it starts, from the folder it
was deployed from (`_users_code`), so an app restarted with changed code runs the new code,
and two apps whose modules share a name each import their own. The functions reach Spark's
Python workers by value (`millrace.engine.user_code`), never from a worker's cache.

`python -m millrace.ops.host` is the host's supervisor (`supervise`): it runs the host as a
child (`python -m millrace.ops.host --serve`, its output with the supervisor's in
`host/host.log`) and starts it again when it dies (kill -9, out of memory, or its Spark
JVM's end, on which the host ends at once), at most `MAX_STARTS` times in
`STARTS_WINDOW_S`. A host that starts takes back the apps whose host died under them
(`_orphans`, `awaits_its_host`): each recovers from its checkpoint, as `millrace restart
APP` would. On SIGTERM the host stops every app gracefully; it ends by itself once it has
run no app for `LINGER_S`; either way the supervisor ends with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from millrace.apps.app import App
from millrace.apps.runner import GRACE_S, drive_on, stop_requests
from millrace.config.proc_stat import thread_cpu_s
from millrace.config.workspace import Workspace
from millrace.engine import spark_internals
from millrace.engine.session import app_session, command_session, end_app_session
from millrace.engine.user_code import is_users_module
from millrace.errors import LifecycleError, MillraceError
from millrace.ops import checkpoints, driver_cpu, driver_lock, registry
from millrace.ops.app_logs import rotate_if_large
from millrace.ops.host_inbox import HOST_MODULE, HostProcess, HostRequest, holding_host_lock, take

LINGER_S = 30.0
"""How long a host with no app waits for one before it ends."""

LOCK_WAIT_S = 30.0
"""How long an app's thread waits for the app's driver lock, which the CLI lets go to it."""

MAX_STARTS = 5
STARTS_WINDOW_S = 600.0
"""The supervisor gives up on a host that died `MAX_STARTS` times in `STARTS_WINDOW_S`."""

_INBOX_EVERY_S = 0.2
# The host's exit status when another host holds the workspace's host lock.
_ANOTHER_HOST = 3
# The host's exit status when its Spark JVM ended under it: its supervisor starts it again.
_JVM_ENDED = 4
_JVM_END_WAIT_S = 2.0
"""How long an app that failed waits to know whether the JVM's end was the cause."""
_LOADING = threading.RLock()


@dataclass
class _Hosted:
    thread: threading.Thread
    stopping: threading.Event


class Host:
    """The apps one host runs on its SparkSession, started and stopped by request."""

    def __init__(self, workspace: Workspace, spark: SparkSession) -> None:
        self.workspace = workspace
        self.spark = spark
        self._apps: dict[str, _Hosted] = {}

    @property
    def apps(self) -> list[str]:
        """The apps whose threads still run."""
        self._apps = {name: app for name, app in self._apps.items() if app.thread.is_alive()}
        return sorted(self._apps)

    def own_cpu_s(self) -> dict[str, float]:
        """The CPU seconds each running app used so far on its own, in this process and its JVM.

        Its thread here, its tasks (its scheduler pool's) and its queries' micro-batch loops
        in the JVM (`dev.millrace.spark.AppCpu`); what the apps share is not in it.
        """
        own = {}
        for name, hosted in list(self._apps.items()):
            thread_id = hosted.thread.native_id
            if hosted.thread.is_alive() and thread_id is not None:
                in_jvm = spark_internals.app_cpu_s(self.spark, name)
                own[name] = thread_cpu_s(os.getpid(), thread_id) + in_jvm
        return own

    def handle(self, request: HostRequest) -> None:
        """Start or stop the app of `request`."""
        if request.verb == "stop":
            hosted = self._apps.get(request.app)
            if hosted is not None:
                hosted.stopping.set()
            return
        if request.app in self.apps:
            _say(f"{request.app}: asked to start while it runs here; the request is ignored")
            return
        stopping = threading.Event()
        thread = threading.Thread(
            target=self._run, args=(request, stopping), name=f"app {request.app}", daemon=True
        )
        self._apps[request.app] = _Hosted(thread, stopping)
        thread.start()
        _say(f"{request.app}: started from {request.source}")

    def stop_all(self) -> None:
        """Stop every app gracefully, as `millrace stop` does each, and wait for them to end."""
        for hosted in self._apps.values():
            hosted.stopping.set()
        deadline = time.monotonic() + GRACE_S + 30.0
        for hosted in self._apps.values():
            hosted.thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self, request: HostRequest, stopping: threading.Event) -> None:
        """The app's thread: its lock, its session, its queries, then its exit recorded."""
        workspace, name = self.workspace, request.app
        with _app_log(workspace, name) as say:
            try:
                lock = driver_lock.acquire(
                    workspace, name, request.started_by, source=request.source, wait_s=LOCK_WAIT_S
                )
            except MillraceError as error:
                say(error.render())
                registry.record_exit(workspace, name, 1)
                return
            code = 1
            try:
                with _users_code(request.cwd):
                    app = App.load(request.source)
                session = app_session(self.spark, name)
                try:
                    drive_on(
                        session,
                        workspace,
                        app,
                        request.options,
                        stopping,
                        say=say,
                        on_progress=lambda: checkpoints.remember(workspace, name),
                        starting=lambda: _users_code(request.cwd),
                    )
                finally:
                    checkpoints.remember(workspace, name)
                    end_app_session(session)
                code = 0
            except MillraceError as error:
                say(error.render())
            except Exception:  # one app's failure must not end the host's others
                say(traceback.format_exc().rstrip())
            finally:
                # An app whose calls into Spark failed because Spark's JVM ended did not fail:
                # its exit stays unrecorded, as after a kill -9 of the host, so that the next
                # host runs it again from its checkpoint (`_orphans`).
                ended = spark_internals.jvm_exit_status(wait_s=_JVM_END_WAIT_S if code else 0.0)
                if ended is None:
                    # Recorded while the lock is held: a start that follows finds it cleared.
                    registry.record_exit(workspace, name, code)
                else:
                    say("Spark's JVM ended under the app; the host's next start runs it again")
                lock.release()
                _say(f"{name}: ended ({code})")


def supervise() -> int:
    """Run the host as a child and start it again each time it dies; its last exit status.

    SIGTERM is passed on to the host, which stops its apps gracefully; the supervisor ends
    once the host has ended by itself (status 0) or found another host in its place.
    """
    starts: deque[float] = deque(maxlen=MAX_STARTS)
    terminated = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def terminate(signum: int, frame: object) -> None:
        terminated.set()
        if child is not None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, terminate)
    while True:
        starts.append(time.monotonic())
        child = subprocess.Popen(
            [sys.executable, "-m", HOST_MODULE, "--serve"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: its Spark JVM and workers too
        )
        code = child.wait()
        if code in (0, _ANOTHER_HOST) or terminated.is_set():
            return code
        ended = _how_it_ended(code)
        if len(starts) == MAX_STARTS and time.monotonic() - starts[0] < STARTS_WINDOW_S:
            _say(f"host pid {child.pid} {ended}, its {MAX_STARTS}th start in a row; giving up")
            return code
        _say(f"host pid {child.pid} {ended}; starting it again")


def serve() -> int:
    """Run the host of the workspace until SIGTERM, or until it has had no app for a while."""
    workspace = Workspace.locate().require_initialized()
    settings = workspace.settings
    with holding_host_lock(workspace, settings.spark_master) as described:
        if described is None:
            _say("another host runs in this workspace; this one ends")
            return _ANOTHER_HOST
        _say(f"host pid {described.pid} on {settings.spark_master}")
        with (
            stop_requests() as stopping,
            command_session(settings, "millrace-host", pools=True) as spark,
        ):
            host = Host(workspace, spark)
            spark_internals.count_app_cpu(spark)
            with driver_cpu.recording_host(workspace, host.own_cpu_s):
                for request in _orphans(workspace, described):
                    host.handle(request)
                _serve(workspace, host, stopping)
                host.stop_all()
    _say("host ended")
    return 0


def awaits_its_host(workspace: Workspace, record: registry.AppRecord) -> bool:
    """Whether the app of `record` is down only because its host died under it.

    It was deployed into a host, is still meant to run, and recorded no exit: the host's
    supervisor starts the host again, which runs the app from its checkpoint (`_orphans`).

    Example:
        >>> from millrace.apps.options import RunOptions
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> record = registry.AppRecord("top_events", "sql", "/apps/top_events.sql", "ab12",
        ...     checkpoint="/ws/checkpoints/top_events", log="/ws/apps/top_events/app.log",
        ...     options=RunOptions(hosted=True), status="crashed")
        >>> awaits_its_host(workspace, record)
        True
    """
    return (
        record.options.hosted
        and record.status == "crashed"
        and not workspace.app_exit(record.name).is_file()
    )


def _orphans(workspace: Workspace, host: HostProcess) -> Iterator[HostRequest]:
    """Requests to start again the apps whose host died under them, registered as in `host`.

    Such an app was deployed into a host on `host`'s master, is still meant to run (not
    stopped), recorded no exit, and no driver holds its lock.
    """
    for record in registry.list_apps(workspace):
        orphaned = (
            awaits_its_host(workspace, record)
            and driver_lock.holder(workspace, record.name) is None
            and record.options.on_master(workspace).settings.spark_master == host.master
        )
        if not orphaned:
            continue
        with workspace.app_log(record.name).open("a", encoding="utf-8") as log:
            log.write(
                f"--- {registry.now_iso()} its host ended; host pid {host.pid} runs it again "
                "from its checkpoint\n"
            )
        registry.save(
            workspace,
            replace(
                record,
                pid=host.pid,
                proc_start=host.proc_start,
                started_at=registry.now_iso(),
                status="running",
            ),
        )
        _say(f"{record.name}: its host ended; started again from its checkpoint")
        yield HostRequest(
            "start", record.name, record.source, record.options, record.cwd, "restart"
        )


def _serve(workspace: Workspace, host: Host, stopping: threading.Event) -> None:
    """Carry out the inbox's requests until `stopping`, or until no app ran for `LINGER_S`."""
    empty_since = time.monotonic()
    while not stopping.is_set():
        jvm_ended = spark_internals.jvm_exit_status()
        if jvm_ended is not None:
            _say(
                f"Spark's JVM ended ({_how_it_ended(jvm_ended)}); the host ends, and its "
                "supervisor starts it again"
            )
            # At once, with no cleanup: every call into Spark would fail. The apps' exits
            # stay unrecorded, as after a kill -9, and the next host runs them again.
            os._exit(_JVM_ENDED)
        for request in take(workspace):
            if isinstance(request, LifecycleError):
                _say(request.render())
            else:
                host.handle(request)
        # The JVM's output, which all the apps share, goes to the host's log.
        rotate_if_large(workspace.host_log, workspace.settings)
        if host.apps:
            empty_since = time.monotonic()
        elif time.monotonic() - empty_since > LINGER_S:
            return
        stopping.wait(_INBOX_EVERY_S)


@contextmanager
def _users_code(folder: str | None) -> Iterator[None]:
    """A block in which imports find an app's modules afresh, first in the app's `folder`.

    The modules of users' code that earlier apps imported are dropped from `sys.modules`
    (an app that runs keeps the ones it holds), so that this app's start imports its own,
    as they are now. One app at a time: `sys.path` and `sys.modules` are the process's.
    """
    with _LOADING:
        for name, module in list(sys.modules.items()):
            if is_users_module(module):
                del sys.modules[name]
        if folder:
            sys.path.insert(0, folder)
        try:
            yield
        finally:
            if folder:
                sys.path.remove(folder)


@contextmanager
def _app_log(workspace: Workspace, name: str) -> Iterator[Callable[[str], None]]:
    """A `say` that appends lines to the app's log, as a deployed app's process prints them."""
    path = workspace.app_log(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:

        def say(line: str) -> None:
            log.write(line + "\n")
            log.flush()
            rotate_if_large(path, workspace.settings)

        yield say


def _how_it_ended(code: int) -> str:
    """A process's exit status in words: `status 4`, `killed by SIGKILL`."""
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"status {code}"


def _say(line: str) -> None:
    stamp = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    print(f"{stamp} {line}", flush=True)


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else supervise())
