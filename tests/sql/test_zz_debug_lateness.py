import json
from millrace.engine import progress
from millrace.runtime.sql_apps import start_sql_app
from millrace.testing import _isolated
from millrace.bus.streams import create_stream
from millrace.bus.publisher import Publisher
from millrace.sql.parser import parse_app
from tests.sql.test_lateness import APP, EVENTS


def test_debug(spark, workspace):
    app, renamed = _isolated(parse_app(APP), "dbg1")
    for s in renamed.values():
        create_stream(workspace.settings, s, buckets=1, retention="1d")
    with Publisher(app.inputs[0].stream, settings=workspace.settings, time_field="event_time") as p:
        for e in EVENTS:
            p.send(e)
        p.send({"event_time": "2026-01-01T01:00:00+00:00"})
    running = start_sql_app(spark, workspace, app, available_now=True, max_records_per_batch=2)
    running.await_termination()
    q = running.tables["per_minute"]
    for pr in q.recentProgress:
        print(pr["batchId"], pr["numInputRows"], pr["eventTime"], [ (o["numRowsDroppedByWatermark"], o["numRowsTotal"], o["numRowsUpdated"]) for o in pr["stateOperators"]], pr["sources"][0]["startOffset"], pr["sources"][0]["endOffset"])
    print(running.late_rows())
    print(spark.read.format("delta").load(str(workspace.tables_dir / app.name / "per_minute")).collect())
