"""Whether an app's new code can take over the state its checkpoint holds.

Spark keeps a query's state across restarts as long as the stateful operators read it the
same way: the same grouping keys, the same windows, the same aggregates (their buffers are
the stored values), and for a processor the same state declarations and key buckets. Code
that changes one of these either fails in Spark at the first micro-batch, or, worse, reads
state it misunderstands (a processor's state is JSON to Spark, so a changed type passes).

So millrace records, in `<workspace>/checkpoints/<app>/millrace-state.json`, a fingerprint of
what each stateful query keeps, when the app starts with a checkpoint that has none (a fresh
start, or a checkpoint of an older millrace), and compares the new code's fingerprint with it
before every start. Whatever else changes (filters, projections, stateless queries, output
streams, new queries) is carried over. A difference raises `StateSchemaError` naming the
query and what changed, with the options: keep the old code, or start fresh (`millrace
restart APP --fresh`, which moves the checkpoint aside), or force the start and let Spark
decide (`--force`).
"""

from __future__ import annotations

import json

from sqlglot import exp

from millrace.apps.processors.placement import Placement, bucket_count
from millrace.config.workspace import Workspace
from millrace.engine.checkpoint_log import commits_log
from millrace.errors import StateSchemaError
from millrace.processor.processor import Processor
from millrace.sql.aggregates import is_aggregate
from millrace.sql.parser import SqlApp, group_key_columns

Fingerprint = dict[str, dict[str, object]]
"""What each stateful query of an app keeps, by query name (`table.<name>`, `processor`)."""

PROCESSOR_QUERY = "processor"
"""The name of a processor's one streaming query, and of its checkpoint's folder."""

# Before the count was recorded, every processor ran with 64, grouped by their numbers.
_BUCKETS_BEFORE_RECORDING = 64
_SPREAD = "spread"


def sql_fingerprint(app: SqlApp) -> Fingerprint:
    """What each result table's query keeps as state: keys, windows, aggregates, mode.

    Example:
        >>> from millrace.sql.parser import parse_app
        >>> app = parse_app(
        ...     "CREATE APPLICATION top_events; "
        ...     "CREATE INPUT TABLE events (event STRING, category STRING) "
        ...     "FROM STREAM('events_stream') TIME event_time LATENESS '30 seconds'; "
        ...     "CREATE TABLE top_events_5min AS "
        ...     "SELECT category, COUNT(*) AS n FROM events [5 minutes] GROUP BY category; "
        ...     "INSERT INTO STREAM('superbowl_posts') "
        ...     "SELECT * FROM events WHERE category = 'sports';"
        ... )
        >>> sql_fingerprint(app)
        {'table.top_events_5min': {'keys': ['window_start', 'window_end', 'category'],
                                   'windows': {'events': 'Window(size_ms=300000, slide_ms=None)'},
                                   'aggregates': ['COUNT(*)'], 'mode': 'final'}}
    """
    found: Fingerprint = {}
    for table in app.tables:
        query = table.query
        aggregates = []
        if isinstance(query.tree, exp.Select):
            for expression in query.tree.expressions:
                for node in expression.walk():
                    if is_aggregate(node):
                        aggregates.append(node.sql(dialect="spark"))
        found[f"table.{table.name}"] = {
            "keys": group_key_columns(query),
            "windows": {name: repr(window) for name, window in sorted(query.windows.items())},
            "aggregates": sorted(set(aggregates)),
            "mode": table.mode,
        }
    return found


def processor_fingerprint(processor: type[Processor], placement: Placement) -> Fingerprint:
    """What a processor keeps as state: its declared states and types, keys and buckets.

    A spread placement (`millrace.apps.processors.placement`) is recorded as `groups`.

    Example:
        >>> from millrace.processor import Input, ValueState
        >>> class RunningCount(Processor):
        ...     name = "running_count"
        ...     inputs = [Input("clicks", key="user")]
        ...     seen = ValueState(int)
        ...     def on_record(self, key, record, ctx):
        ...         self.seen.set(self.seen.get(0) + 1)
        >>> processor_fingerprint(RunningCount, Placement(8))
        {'processor': {'kind': 'stateful', 'states': {'seen': 'ValueState[int]'},
                       'keys': {'clicks': 'user'}, 'buckets': 8, 'groups': 'spread'}}
    """
    states = {
        name: f"{type(declaration).__name__}[{_type_name(declaration.value_type)}]"
        for name, declaration in sorted(processor.states().items())
    }
    keys = {source.stream: _key_fingerprint(source.key) for source in processor.inputs}
    groups = {"groups": _SPREAD} if placement.spread else {}
    return {
        PROCESSOR_QUERY: {
            "kind": processor.kind(),
            "states": states,
            "keys": keys,
            "buckets": placement.buckets,
            **groups,
        }
    }


def processor_placement(workspace: Workspace, processor: type[Processor]) -> Placement:
    """The buckets `processor` runs with: those its checkpoint was started with, if any.

    A key's state lives in its bucket, so an app keeps its checkpoint's placement; a new one
    starts with `bucket_count`'s, spread. A processor's own `buckets` is taken either way
    (`check_state` refuses one its checkpoint does not have).

    Example:
        >>> from millrace.processor import Input
        >>> class Passing(Processor):
        ...     name = "passing"
        ...     inputs = [Input("clicks", key="user")]
        ...     def on_record(self, key, record, ctx): ctx.produce("seen", record)
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> processor_placement(workspace, Passing)
        Placement(buckets=8, spread=True)
        >>> (workspace.checkpoint("passing", "processor") / "commits").mkdir(parents=True)
        >>> record_state(workspace, "passing", processor_fingerprint(Passing, Placement(64, False)))
        >>> processor_placement(workspace, Passing)
        Placement(buckets=64, spread=False)
    """
    if not commits_log(workspace.checkpoint(processor.name, PROCESSOR_QUERY)).is_dir():
        return Placement(bucket_count(processor))
    recorded = recorded_state(workspace, processor.name).get(PROCESSOR_QUERY, {})
    buckets = recorded.get("buckets")
    if not isinstance(buckets, int):
        buckets = _BUCKETS_BEFORE_RECORDING
    return Placement(processor.buckets or buckets, spread=recorded.get("groups") == _SPREAD)


def check_state(workspace: Workspace, app: str, fingerprint: Fingerprint) -> None:
    """Raise `StateSchemaError` when `app`'s checkpoint holds state `fingerprint` cannot read.

    Queries without a checkpoint start fresh and pass; so does an app whose checkpoint has
    no recorded fingerprint yet (it is recorded by `record_state`).

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> (workspace.checkpoint("counter", "processor") / "commits").mkdir(parents=True)
        >>> record_state(workspace, "counter", {"processor": {"buckets": 64}})
        >>> try:
        ...     check_state(workspace, "counter", {"processor": {"buckets": 32}})
        ... except StateSchemaError as error:
        ...     print(error.message.replace(str(tmp_path), "<tmp>"))
        app 'counter': the new code keeps state that its checkpoint (<tmp>/checkpoints/counter)
        does not hold, so Spark cannot carry the state over:
          query processor: buckets was 64, the new code has 32
    """
    recorded = recorded_state(workspace, app)
    root = workspace.app_checkpoints(app)
    changes = []
    for query, new in fingerprint.items():
        old = recorded.get(query)
        if old is None or not commits_log(workspace.checkpoint(app, query)).is_dir():
            continue
        for part in sorted(set(old) | set(new)):
            if _changed(part, old.get(part), new.get(part)):
                changes.append(
                    f"query {query}: {part} was {_show(old.get(part))}, "
                    f"the new code has {_show(new.get(part))}"
                )
    if changes:
        raise StateSchemaError(
            f"app {app!r}: the new code keeps state that its checkpoint ({root}) does not "
            "hold, so Spark cannot carry the state over:\n  " + "\n  ".join(changes),
            hint=(
                "keep the old code running (deploy the previous version again), or start the "
                f"new code fresh with `millrace restart {app} --fresh [--from earliest|latest|"
                "TIME]` (the old checkpoint is moved aside and its state is not used), or "
                "`--force` to start anyway and let Spark's own check decide"
            ),
        )


def record_state(workspace: Workspace, app: str, fingerprint: Fingerprint) -> None:
    """Record `fingerprint` as what `app`'s checkpoint holds, keeping entries of other queries."""
    recorded = recorded_state(workspace, app)
    path = workspace.state_fingerprint(app)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recorded | fingerprint, indent=2, sort_keys=True) + "\n")


def recorded_state(workspace: Workspace, app: str) -> Fingerprint:
    """The fingerprint recorded for `app`'s checkpoint, or an empty one."""
    path = workspace.state_fingerprint(app)
    return json.loads(path.read_text()) if path.is_file() else {}


_KEY_FUNCTION = "<function>"


def _key_fingerprint(key: object) -> object:
    # As it reads back from the recorded JSON: a tuple of columns is a list there.
    return _KEY_FUNCTION if callable(key) else list(key) if isinstance(key, tuple) else key


def _changed(part: str, old: object, new: object) -> bool:
    if part == "keys" and isinstance(old, dict) and isinstance(new, dict):
        # What a key function returns is unknown, so it is not compared: a function becoming
        # the key columns it read (or another function) may keep every key where it was.
        return any(
            old.get(stream) != new.get(stream)
            for stream in old.keys() | new.keys()
            if _KEY_FUNCTION not in (old.get(stream), new.get(stream))
        )
    return old != new


def _type_name(value_type: object) -> str:
    return getattr(value_type, "__name__", None) or repr(value_type)


def _show(value: object) -> str:
    return json.dumps(value) if value is not None else "nothing"
