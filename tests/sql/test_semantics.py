"""The semantics option of SQL apps: readers drop copies by id (exactly_once), keep them
(at_least_once), and a micro-batch marked as started is not written again (at_most_once)."""

import re
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.apps.sql.running import start_sql_app, state_store_notices
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.delivery import AtMostOnce
from millrace.engine.session import checkpoint_state_store
from millrace.errors import SqlError
from millrace.sql.parser import parse_app
from millrace.warehouse.result_tables import read_result_rows

START_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
MINUTE_MS = 60_000


def _app(
    name: str, semantics: str, source: str, output: str, batch: int = 1000, store: str = "memory"
) -> str:
    return (
        f"CREATE APPLICATION {name} WITH (semantics = '{semantics}', "
        f"max_records_per_batch = '{batch}', state_store = '{store}');\n"
        "CREATE INPUT TABLE events (event_time, category, amount INT)\n"
        f"  FROM STREAM('{source}') TIME event_time LATENESS '1 minute';\n"
        f"INSERT INTO STREAM('{output}') SELECT category, amount FROM events WHERE amount > 0;\n"
        "CREATE TABLE per_minute AS\n"
        "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM events [1 minute]\n"
        "GROUP BY category;\n"
    )


def _events() -> list[tuple[str, dict]]:
    """(id, event): 300 events over 5 minutes, then a copy of every 10th, sent soon after
    its original (as a re-run batch would), then one far ahead to close the windows."""
    events = [
        (
            f"e{n}",
            {
                "event_time": START_MS + n * 1000,
                "category": ("a", "b", "c")[n % 3],
                "amount": n % 5,
            },
        )
        for n in range(300)
    ]
    with_copies = []
    for position, (record_id, event) in enumerate(events):
        with_copies.append((record_id, event))
        if position % 10 == 9:
            with_copies.append(events[position - 5])
    closing = {"event_time": START_MS + 3600_000, "category": "zz", "amount": 0}
    return [*with_copies, ("closing", closing)]


def _answer(events: list[tuple[str, dict]], *, copies: bool) -> dict:
    seen: set[str] = set()
    answer: Counter = Counter()
    totals: Counter = Counter()
    for record_id, event in events:
        if record_id == "closing" or (record_id in seen and not copies):
            continue
        seen.add(record_id)
        key = ((event["event_time"] - START_MS) // MINUTE_MS, event["category"])
        answer[key] += 1
        totals[key] += event["amount"]
    return {key: (answer[key], totals[key]) for key in answer}


def _publish(workspace: Workspace, source: str, events: list[tuple[str, dict]]) -> None:
    with Publisher(source, settings=workspace.settings, time_field="event_time") as publisher:
        for record_id, event in events:
            publisher.send(event, record_id=record_id)


def _per_minute(spark: SparkSession, workspace: Workspace, app: str) -> dict:
    """The app's result table as `_answer` gives it: (count, total) by (minute, category)."""
    return {
        ((int(row["window_start"].timestamp() * 1000) - START_MS) // MINUTE_MS, row["category"]): (
            row["n"],
            row["total"],
        )
        for row in read_result_rows(workspace, app, "per_minute")
    }


def test_exactly_once_drops_copies_by_id_and_at_least_once_keeps_them(
    spark: SparkSession, workspace: Workspace
) -> None:
    run = uuid.uuid4().hex[:8]
    source = f"test.semantics-in.{run}"
    create_stream(workspace.settings, source, buckets=1)
    events = _events()
    _publish(workspace, source, events)
    results = {}
    outputs = {}
    for semantics in ("exactly_once", "at_least_once"):
        name, output = f"semantics_{semantics}_{run}", f"test.semantics-out.{semantics}.{run}"
        create_stream(workspace.settings, output)
        app = parse_app(_app(name, semantics, source, output, batch=50))
        start_sql_app(spark, workspace, app, available_now=True).await_termination()
        results[semantics] = _per_minute(spark, workspace, name)
        outputs[semantics] = Counter(
            record.id
            for record in tail(output, TailStart(from_beginning=True), settings=workspace.settings)
        )

    assert results["exactly_once"] == _answer(events, copies=False)
    assert results["at_least_once"] == _answer(events, copies=True)
    # An insert's record takes the id `<app>:<stream>:<input id>`; without copies read, it
    # writes each once.
    kept = {record_id for record_id, event in events if event["amount"] > 0}
    exactly = outputs["exactly_once"]
    prefix = f"semantics_exactly_once_{run}:test.semantics-out.exactly_once.{run}:"
    assert exactly == Counter({f"{prefix}{record_id}": 1 for record_id in kept})
    assert sum(outputs["at_least_once"].values()) > len(outputs["at_least_once"])


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
def test_exactly_once_gives_the_same_results_on_either_state_store(
    spark: SparkSession, workspace: Workspace, store: str
) -> None:
    run = uuid.uuid4().hex[:8]
    source, output = f"test.store-in.{run}", f"test.store-out.{run}"
    create_stream(workspace.settings, source, buckets=1)
    create_stream(workspace.settings, output)
    events = _events()
    _publish(workspace, source, events)
    name = f"store_{store}_{run}"
    app = parse_app(_app(name, "exactly_once", source, output, batch=50, store=store))

    start_sql_app(spark, workspace, app, available_now=True).await_termination()

    assert _per_minute(spark, workspace, name) == _answer(events, copies=False)
    # Spark records each query's state store in its write-ahead log, and keeps it on restart.
    queries = ("table.per_minute", f"insert.{output}")
    for query in queries:
        assert checkpoint_state_store(workspace.checkpoint(name, query)) == store
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass").endswith(
        "RocksDBStateStoreProvider"
    )
    # Asking another store of an app that has run is told where its state stays, and how to move.
    other = "rocksdb" if store == "memory" else "memory"
    assert state_store_notices(workspace, app) == []
    moved = parse_app(_app(name, "exactly_once", source, output, batch=50, store=other))
    notices = state_store_notices(workspace, moved)
    assert [notice.split()[1] for notice in notices] == sorted(queries)
    for notice in notices:
        assert f"keeps its state in '{store}'" in notice
        assert f"state_store = '{other}' applies to a new checkpoint" in notice
        assert f"millrace restart {name} --fresh" in notice


def test_at_most_once_does_not_write_a_batch_marked_as_started(
    spark: SparkSession, workspace: Workspace
) -> None:
    run = uuid.uuid4().hex[:8]
    source, output = f"test.amo-in.{run}", f"test.amo-out.{run}"
    create_stream(workspace.settings, source, buckets=1)
    create_stream(workspace.settings, output)
    events = _events()[:100]
    _publish(workspace, source, events)
    name = f"amo_{run}"
    app = parse_app(_app(name, "at_most_once", source, output, batch=50))
    # As if a run had died while writing micro-batch 0: its mark is there.
    marks = workspace.checkpoint(name, f"insert.{output}") / "at_most_once"
    marks.mkdir(parents=True)
    (marks / f"{0:020d}").touch()

    start_sql_app(spark, workspace, app, available_now=True).await_termination()

    written = Counter(
        record.id
        for record in tail(output, TailStart(from_beginning=True), settings=workspace.settings)
    )
    # Batch 0 (the first 50 records) is not written, batch 1 (the next 50) is, once.
    prefix = f"{name}:{output}:"
    second = Counter(f"{prefix}{record_id}" for record_id, event in events[50:] if event["amount"])
    assert written == second


@pytest.mark.parametrize("semantics", ["exactly_once", "at_most_once"])
def test_a_batch_re_run_after_its_result_was_written_commits_its_state_and_writes_nothing_twice(
    spark: SparkSession, workspace: Workspace, semantics: str
) -> None:
    run = uuid.uuid4().hex[:8]
    source, output = f"test.rerun-in.{run}", f"test.rerun-out.{run}"
    create_stream(workspace.settings, source, buckets=1)
    create_stream(workspace.settings, output)
    events = [*_events()[:100], _events()[-1]]
    _publish(workspace, source, events)
    name = f"rerun_{semantics}_{run}"
    app = parse_app(_app(name, semantics, source, output, batch=50, store="rocksdb"))
    start_sql_app(spark, workspace, app, available_now=True).await_termination()
    expected = _per_minute(spark, workspace, name)
    # As if the driver had been killed after the last micro-batch wrote the result table and
    # before Spark recorded it done: the restart runs that batch again. Spark refuses to go on
    # unless the re-run commits the batch's state, although it writes nothing.
    commits = workspace.checkpoint(name, "table.per_minute") / "commits"
    last = max(int(path.name) for path in commits.iterdir() if path.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)

    start_sql_app(spark, workspace, app, available_now=True).await_termination()

    assert (commits / str(last)).exists()
    assert _per_minute(spark, workspace, name) == expected
    assert expected == _answer(events, copies=semantics == "at_most_once")


def test_at_most_once_runs_a_write_once_per_batch(tmp_path: Path) -> None:
    once = AtMostOnce(tmp_path / "marks")
    calls: list[int] = []

    assert once.write(3, lambda: calls.append(3))
    assert not once.write(3, lambda: calls.append(33))
    assert once.write(4, lambda: calls.append(4))
    assert calls == [3, 4]
    assert once.skipped == [3]


def test_an_unknown_semantics_is_an_error_at_its_place() -> None:
    with pytest.raises(SqlError, match=r"<string>:1:28: semantics 'sometimes' is not known"):
        parse_app("CREATE APPLICATION a WITH (semantics = 'sometimes');")
    app = parse_app("CREATE APPLICATION a WITH (semantics = 'AT_MOST_ONCE');")
    assert (app.semantics, app.max_records_per_batch) == ("at_most_once", None)
    assert parse_app("CREATE APPLICATION a;").semantics == "exactly_once"


def test_an_unknown_state_store_is_an_error_at_its_place() -> None:
    with pytest.raises(SqlError, match=r"<string>:1:28: state_store 'disk' is not known"):
        parse_app("CREATE APPLICATION a WITH (state_store = 'disk');")
    assert parse_app("CREATE APPLICATION a WITH (state_store = 'RocksDB');").state_store == (
        "rocksdb"
    )
    assert parse_app("CREATE APPLICATION a;").state_store == "memory"


def test_the_sql_example_of_docs_semantics_parses() -> None:
    text = (Path(__file__).parents[2] / "docs" / "semantics.md").read_text()
    (example,) = re.findall(r"```sql\n(.*?)```", text, re.S)
    app = parse_app(example)
    assert (app.name, app.semantics) == ("clicks_per_minute", "at_least_once")
