"""The code of docs/serving.md runs as the page says."""

import re
from pathlib import Path

import millrace
from millrace.config.workspace import Workspace
from millrace.serving.tables import drop_table
from millrace.sql.parser import parse_app
from millrace.testing import ProcessorTester

PAGE = Path(__file__).parents[2] / "docs" / "serving.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_the_python_api_example_runs(workspace: Workspace, redis_url: str, capsys) -> None:
    [example] = [block for block in _blocks("python") if "create_table(" in block]
    exec(compile(example, str(PAGE), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert "'classifications'" in printed[0]
    assert printed[1:] == ["None", "[None, None]"]
    drop_table(workspace.settings, "classifications")


def test_the_enricher_processor_of_the_page_enriches_from_the_testers_tables() -> None:
    [block] = [block for block in _blocks("python") if "class Enricher" in block]
    namespace = {"Processor": millrace.Processor, "Input": millrace.Input}
    exec(compile(block, str(PAGE), "exec"), namespace)
    tester = ProcessorTester(
        namespace["Enricher"], tables={"classifications": {"d1": {"topic": "cats"}}}
    )
    tester.feed("events", [{"user": "u", "dimension_id": d, "time": 1000} for d in ("d1", "d2")])
    tester.run_batch()
    assert tester.values("enriched") == [
        {"user": "u", "topic": "cats"},
        {"user": "u", "topic": None},
    ]


def test_the_sql_statements_of_the_page_parse_in_an_app() -> None:
    head = (
        "CREATE APPLICATION docs;\n"
        "CREATE INPUT TABLE events (dimension_id, n BIGINT) FROM STREAM('events') TIME time;\n"
    )
    app = parse_app(head + "\n".join(_blocks("sql")))
    assert [lookup.table for lookup in app.inserts[0].query.lookups] == ["classifications"]
    assert (app.tables[0].serve, app.tables[0].ttl) == ("topic_totals_by_topic", "1d")
