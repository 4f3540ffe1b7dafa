"""An app as every verb loads it: one type, a SQL app or a processor, and one batch result."""

from pathlib import Path

import pytest

from millrace.apps.app import App, BatchResult, ProcessorApp, RoutedInput, SqlFileApp
from millrace.apps.processors.batch import ProcessorBatchRun
from millrace.apps.processors.placement import DEFAULT_BUCKETS
from millrace.apps.sql.batch import BatchRun
from millrace.config.workspace import Workspace
from millrace.errors import LifecycleError, SqlError

ROOT = Path(__file__).parents[2]


def test_a_sql_apps_file_loads_with_its_queries_tables_and_absolute_source(
    monkeypatch: pytest.MonkeyPatch, fresh_workspace: Workspace
) -> None:
    monkeypatch.chdir(ROOT)
    app = App.load("examples/top_events.sql")
    assert isinstance(app, SqlFileApp)
    assert (app.kind, app.name) == ("sql", "top_events")
    # Absolute, so that a deployed process started in another folder finds it.
    assert app.source == str(ROOT / "examples" / "top_events.sql")
    assert app.queries == ("insert.superbowl_posts", "table.top_events_5min")
    assert app.tables == ("top_events_5min",)
    assert list(app.fingerprint(fresh_workspace)) == ["table.top_events_5min"]


def test_a_processor_loads_from_its_file_with_its_one_query(
    monkeypatch: pytest.MonkeyPatch, fresh_workspace: Workspace
) -> None:
    monkeypatch.chdir(ROOT)
    app = App.load("examples/zeitgeist.py:Zeitgeist")
    assert isinstance(app, ProcessorApp)
    assert (app.kind, app.name) == ("processor", "zeitgeist")
    assert app.source == f"{ROOT / 'examples' / 'zeitgeist.py'}:Zeitgeist"
    assert (app.queries, app.tables) == (("processor",), ())
    # A new app's state is spread over the default buckets.
    assert app.fingerprint(fresh_workspace)["processor"]["buckets"] == DEFAULT_BUCKETS
    app.require_streamable()


def test_a_sql_apps_file_that_is_not_there_is_named_with_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(LifecycleError) as missing:
        App.load(str(tmp_path / "gone.sql"))
    assert missing.value.message == f"no file {str(tmp_path / 'gone.sql')!r}"
    assert "module:Class" in missing.value.hint


def test_an_aggregate_only_a_batch_run_can_run_loads_but_is_refused_as_a_stream(
    tmp_path: Path,
) -> None:
    source = tmp_path / "users.sql"
    source.write_text(
        "CREATE APPLICATION users;\n"
        "CREATE INPUT TABLE events (event_time, user, category) FROM STREAM('events') "
        "TIME event_time;\n"
        "CREATE TABLE users WITH (mode = 'updates') AS\n"
        "SELECT category, COUNT(DISTINCT user) AS users\n"
        "FROM events GROUP BY category;\n"
    )
    app = App.load(str(source))  # `run --batch` and `backfill` run it
    with pytest.raises(SqlError, match=r"users.sql:4:18: COUNT\(DISTINCT user\) cannot run"):
        app.require_streamable()


def test_batch_runs_of_both_kinds_give_one_result_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    sql = App.load("examples/top_events.sql")
    processor = App.load("examples/zeitgeist.py:Zeitgeist")
    assert isinstance(sql, SqlFileApp) and isinstance(processor, ProcessorApp)

    ran = BatchRun(sql.sql, {"top_events_5min": 288}, {"superbowl_posts": 4}, {"events_score": 2})
    assert BatchResult.of_sql(ran, 0, 10) == BatchResult(
        "top_events",
        "sql",
        0,
        10,
        tables={"top_events_5min": 288},
        streams={"superbowl_posts": 4},
        dead_letters=2,
        routed=(RoutedInput("events_score", "events_stream", 2),),
    )
    assert BatchResult.of_processor(
        ProcessorBatchRun(processor.processor, 0, 10, productions=7, dead_letters=1)
    ) == BatchResult("zeitgeist", "processor", 0, 10, productions=7, dead_letters=1)
    assert RoutedInput("events_score", "events_stream", 2).line() == (
        "input events_score: 2 bad records routed to events_stream.dlq"
    )
