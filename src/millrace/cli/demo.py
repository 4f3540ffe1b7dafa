"""`millrace demo`: the trending-events pipeline of the Facebook paper, live on one machine.

Figure 3 of `realtime-data-processing-at-facebook.txt` (see docs/trending.md): a generator
publishes events to `trending.events`; the Filterer (SQL) keeps the relevant event types; the
Joiner (SQL, `JOIN LOOKUP`) adds each event's name and topic from the serving table
`trending_dimensions` and reshards by (event, topic); the Scorer (a processor) keeps
sliding-window counts and a long-term trend per (event, topic) and scores each 10-second
pane; the Ranker (SQL, `TOPK`) keeps the top 3 events per topic and 10-second window in its
result table, which `millrace serve` answers at `/apps/trending_ranker/tables/top_events`.

`run_demo` brings Kafka and Redis up (and meanwhile the workspace's host), creates what is
missing (streams, the dimensions table), runs the generator in a thread, deploys the four
apps detached into the host, one Spark application for all four (`millrace.ops.host`; with
`hosted=False` each in a Spark application of its own; `millrace ps` lists them either
way), and prints progress and
each new window's top 3 per topic until it is interrupted
(Ctrl-C, or SIGTERM, taken as the runner takes it: `runner.stop_requests`) or `seconds` have
passed; then it stops the generator and the apps gracefully. Kafka and Redis stay up, and
the host until it has run no app for a while. The apps keep their checkpoints: a second run
resumes. Each app runs by the runner that `millrace run` uses.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType

from millrace.api.app_details import find_last_error
from millrace.apps.options import RunOptions
from millrace.apps.runner import stop_requests
from millrace.bus.broker import start_broker
from millrace.bus.streams import dead_letter_stream, describe_stream
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import (
    AlreadyDeployedError,
    AppNotFoundError,
    MillraceError,
    SqlError,
)
from millrace.monitor.service import Monitor
from millrace.ops import registry
from millrace.ops.host import awaits_its_host
from millrace.ops.host_inbox import start_host
from millrace.ops.lifecycle import deploy, stop
from millrace.serving.server import start_redis
from millrace.warehouse.result_tables import TableRow, read_result_rows

RANKER = "trending_ranker"
RANKER_TABLE = "top_events"
APP_NAMES = ("trending_filterer", "trending_joiner", "trending_scorer", RANKER)
_HOST_RESTART_WAIT_S = 120.0
"""How long the demo waits for apps whose host died to run again in the next host."""
_PROGRESS_EVERY_S = 5.0
"""How often the demo prints its progress line, and looks for new windows once one showed."""
_FIRST_WINDOW_POLL_S = 1.0
"""How often it looks for the first window, so that the first top 3 shows once it is there."""
LEAN_SPARK = {
    # Small streams on a small machine: few shuffle partitions. A setting the user made (in
    # the environment) wins, here and in ISOLATED_SPARK.
    "MILLRACE_SPARK_SHUFFLE_PARTITIONS": "2",
}
ISOLATED_SPARK = {
    # Four Spark applications share the machine (`--isolated`): a small heap each.
    "MILLRACE_SPARK_DRIVER_MEMORY": "1g",
    # The JVM's optimizing compiler (C2) makes four cold JVMs compete for 2 cores while they
    # start, for speed the demo's 200 events/s never needs: C1 alone brought the first top-K
    # from 166 s to 106 s on the 2-core machine (docs/trending.md).
    "MILLRACE_SPARK_DRIVER_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1",
}


@dataclass
class DemoRun:
    """What a demo run saw: when its first top-K appeared, what it published, and so on."""

    started: float = field(default_factory=time.monotonic)
    first_results_s: float | None = None
    events: int = 0
    malformed: int = 0
    windows_shown: int = 0
    dead_letters_before: int = 0


def trending_dir() -> Path:
    """The folder of the pipeline's apps: `examples/trending` of the source tree, or of here.

    Example:
        >>> trending_dir().name
        'trending'
    """
    candidates = [
        Path(__file__).resolve().parents[3] / "examples" / "trending",
        Path.cwd() / "examples" / "trending",
    ]
    for candidate in candidates:
        if (candidate / "generator.py").is_file():
            return candidate
    raise MillraceError(
        "cannot find examples/trending (the demo's apps)",
        hint="run `millrace demo` from the millrace source tree",
    )


def run_demo(
    workspace: Workspace,
    *,
    rate: float,
    seconds: float | None,
    say: Callable[[str], None],
    trigger: str = "interval:2s",
    hosted: bool = True,
) -> DemoRun:
    """Run the pipeline live until interrupted or `seconds` have passed; then stop the apps.

    With `hosted` the apps run in the workspace's host; otherwise each in a driver of its own.
    """
    run = DemoRun()
    folder = trending_dir()
    generator = _load(folder / "generator.py")
    # Set before the host starts, which takes its settings from the environment.
    for name, value in {**LEAN_SPARK, **({} if hosted else ISOLATED_SPARK)}.items():
        os.environ.setdefault(name, value)
    options = RunOptions(Trigger.parse(trigger), hosted=hosted)
    host_starting = _start_host_meanwhile(workspace, options) if hosted else None
    bus = start_broker(workspace)
    redis = start_redis(workspace)
    say(f"1. Kafka up at {bus.bootstrap_servers}, Redis up at {redis.url}")
    settings = workspace.settings
    generator.setup(settings)
    run.dead_letters_before = _dead_letter_count(workspace, generator.EVENTS) or 0
    say(
        f"2. streams {', '.join(generator.STREAMS)} ready; serving table "
        f"{generator.DIMENSIONS_TABLE!r} loaded from {generator.DIMENSIONS_FILE.name}"
    )
    if host_starting is not None:
        host_starting.join()
    stopping = threading.Event()
    deployed: list[str] = []
    sender: threading.Thread | None = None
    with stop_requests() as asked_to_stop:
        try:

            def counted(events: int, malformed: int) -> None:
                run.events, run.malformed = events, malformed

            # The generator starts first: the apps read its stream from the start, so the
            # events of their start-up are there for the first windows when they run.
            sender = threading.Thread(
                target=generator.run,
                kwargs={"settings": settings, "rate": rate, "stop": stopping, "on_sent": counted},
                name="generator",
                daemon=True,
            )
            sender.start()
            say(f"3. generator publishing {rate:g} events/s to {generator.EVENTS}")
            for source in generator.APPS:
                if asked_to_stop.is_set():
                    raise KeyboardInterrupt
                where, _, cls = source.partition(":")
                path = str(folder / where) + (f":{cls}" if cls else "")
                record = _deploy(workspace, path, options)
                deployed.append(record.name)
                hosted_here = record.options.hosted
                driver = f"the host, pid {record.pid}" if hosted_here else f"pid {record.pid}"
                say(f"4. deployed {record.name} ({driver}, log {record.log})")
            say(
                "5. the apps start their queries (a minute or so on a busy machine) and read "
                "the events from the first; then the first 10-second windows close"
            )
            _watch(workspace, run, deployed, seconds, say, asked_to_stop)
        except KeyboardInterrupt:
            say("interrupted")
        finally:
            stopping.set()
            if sender is not None:
                sender.join(timeout=10)
            _stop_all(workspace, deployed, say)
            _summary(run, generator.EVENTS, _dead_letter_count(workspace, generator.EVENTS), say)
    return run


def _start_host_meanwhile(workspace: Workspace, options: RunOptions) -> threading.Thread:
    """Start the workspace's host on a thread, so that its Spark starts while the bus does.

    The first deploy would start it otherwise, some seconds later, once the bus is up and
    the streams are made; a host that could not start here is started, or its error told,
    by that deploy.
    """
    master = options.on_master(workspace).settings.spark_master

    def start() -> None:
        with contextlib.suppress(MillraceError):
            start_host(workspace, master)

    starting = threading.Thread(target=start, name="host start", daemon=True)
    starting.start()
    return starting


def _deploy(workspace: Workspace, source: str, options: RunOptions) -> registry.AppRecord:
    try:
        return deploy(workspace, source, options)
    except AlreadyDeployedError as error:
        # A demo left running (its terminal closed): stop it and start it again.
        stop(workspace, error.app)
        return deploy(workspace, source, options)


def _watch(
    workspace: Workspace,
    run: DemoRun,
    apps: list[str],
    seconds: float | None,
    say: Callable[[str], None],
    asked_to_stop: threading.Event,
) -> None:
    """Print progress every few seconds and each new window's top K, until time is up.

    Raises `KeyboardInterrupt` once the process is asked to stop (SIGTERM), as Ctrl-C does.
    """
    monitor = Monitor(workspace)
    shown: set[datetime] = set()
    last_events, last_time = 0, time.monotonic()
    progress_due = last_time + _PROGRESS_EVERY_S
    awaiting: dict[str, float] = {}
    while seconds is None or time.monotonic() - run.started < seconds:
        poll_s = _FIRST_WINDOW_POLL_S if run.first_results_s is None else _PROGRESS_EVERY_S
        if asked_to_stop.wait(max(0.0, min(poll_s, progress_due - time.monotonic()))):
            raise KeyboardInterrupt
        if time.monotonic() >= progress_due:
            progress_due += _PROGRESS_EVERY_S
            _check_apps(workspace, apps, awaiting, say)
            now = time.monotonic()
            rate = (run.events - last_events) / (now - last_time)
            last_events, last_time = run.events, now
            say(
                f"[{now - run.started:5.0f} s] published {run.events} events ({rate:.0f}/s), "
                f"{run.malformed} malformed; " + _lags(monitor, apps)
            )
        for window, rows in _new_windows(workspace, shown):
            if run.first_results_s is None:
                run.first_results_s = time.monotonic() - run.started
                say(f"first top-K after {run.first_results_s:.0f} s")
            run.windows_shown += 1
            say(
                f"  top 3 per topic, window {window:%H:%M:%S}-{rows[0]['window_end']:%H:%M:%S} UTC:"
            )
            for row in sorted(rows, key=lambda row: row["topic"]):
                say(topic_line(row))


def _check_apps(
    workspace: Workspace,
    apps: list[str],
    awaiting: dict[str, float],
    say: Callable[[str], None],
) -> None:
    """Raise `MillraceError` for an app that stopped running, unless its host is restarting.

    `awaiting` holds the apps whose host died, and since when: its supervisor starts it
    again, and it them.
    """
    for name in apps:
        record = registry.load(workspace, name)
        if record.status == "running":
            if awaiting.pop(name, None) is not None:
                say(f"{name}: runs again, from its checkpoint")
            continue
        if awaits_its_host(workspace, record):
            if name not in awaiting:
                awaiting[name] = time.monotonic()
                say(f"{name}: its host ended; it runs again once the host has started again")
            if time.monotonic() - awaiting[name] < _HOST_RESTART_WAIT_S:
                continue
        raise MillraceError(
            f"app {name} is {record.status}" + _last_error_of(record),
            hint=f"its log: {record.log} (`millrace logs {name}`)",
        )


def _last_error_of(record: registry.AppRecord) -> str:
    """The end of the app's last error in its log, to print beside its status; "" if none."""
    found = find_last_error(Path(record.log))
    if found is None:
        return ""
    return ": " + "\n".join(found.lines[found.error_index :])


def topic_line(row: TableRow) -> str:
    """How the demo prints one of the Ranker's rows: a topic and its top events with scores.

    Example:
        >>> topic_line({"topic": "sports", "top_events": [{"item": "#worldcup", "weight": 9.25}]})
        '    sports   #worldcup (9.2)'
    """
    ranked = ", ".join(f"{entry['item']} ({entry['weight']:.1f})" for entry in row["top_events"])
    return f"    {row['topic']:<8} {ranked}"


def _lags(monitor: Monitor, apps: list[str]) -> str:
    try:
        statuses = {status.name: status for status in monitor.statuses(fresh=True)}
    except MillraceError:
        return "lag: monitor not available"
    parts = []
    for name in apps:
        status = statuses.get(name)
        short = name.removeprefix("trending_")
        if status is None or status.last_batch_id is None:
            parts.append(f"{short} starting")
        else:
            parts.append(f"{short} lag {status.lag_records}")
    return ", ".join(parts)


def _new_windows(
    workspace: Workspace, shown: set[datetime]
) -> list[tuple[datetime, list[TableRow]]]:
    """The Ranker's windows not shown yet, oldest first (all of the latest 3 at most)."""
    try:
        rows = read_result_rows(workspace, RANKER, RANKER_TABLE, last=3)
    except SqlError:
        return []  # no window has closed yet, or a commit is being written
    windows: dict[datetime, list[TableRow]] = {}
    for row in rows:
        windows.setdefault(row["window_start"], []).append(row)
    fresh = [(window, windows[window]) for window in sorted(windows) if window not in shown]
    shown.update(window for window, _ in fresh)
    return fresh


def _stop_all(workspace: Workspace, apps: list[str], say: Callable[[str], None]) -> None:
    """Stop the apps gracefully, all at once (each finishes its micro-batch)."""
    if not apps:
        return
    say(f"stopping {', '.join(apps)} (each finishes its running micro-batch)...")
    threads = [threading.Thread(target=_stop_one, args=(workspace, name)) for name in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _stop_one(workspace: Workspace, name: str) -> None:
    with contextlib.suppress(AppNotFoundError):
        stop(workspace, name)


def _dead_letter_count(workspace: Workspace, stream: str) -> int | None:
    """The records `stream`'s dead-letter stream holds, None before a reader created it."""
    try:
        return describe_stream(workspace.settings, dead_letter_stream(stream)).record_count
    except MillraceError:
        return None


def _summary(
    run: DemoRun, events_stream: str, dead_letters: int | None, say: Callable[[str], None]
) -> None:
    if dead_letters is None:
        letters = "no dead-letter stream yet"
    else:
        routed = dead_letters - run.dead_letters_before
        letters = (
            f"{routed} routed to {dead_letter_stream(events_stream)} this run "
            f"({dead_letters} there in all)"
        )
        if routed < run.malformed:
            # A malformed record published after the Filterer's last micro-batch stays on
            # the stream; the Filterer's next run reads and routes it.
            letters += f", {run.malformed - routed} not read yet: the next run routes them"
    first = (
        f"first top-K after {run.first_results_s:.0f} s"
        if run.first_results_s is not None
        else "no window closed yet"
    )
    say(
        f"done: published {run.events} events and {run.malformed} malformed records; "
        f"{letters}; {first}; {run.windows_shown} windows shown"
    )
    say(
        "Kafka and Redis stay up (`millrace down` stops them); results stay queryable: "
        f"`millrace query {RANKER}.{RANKER_TABLE} --last 3`, or `millrace serve` and "
        f"GET /apps/{RANKER}/tables/{RANKER_TABLE}?topic=sports&last=3"
    )


def _load(path: Path) -> ModuleType:
    name = f"millrace_trending_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise MillraceError(
                f"{path} is not a Python module", hint="reinstall millrace with its examples"
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
