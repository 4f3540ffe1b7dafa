"""Which kind of app a source text names, told apart in one place for run, deploy and backfill."""

from pathlib import Path

import pytest

from millrace.apps.sources import source_kind


@pytest.mark.parametrize(
    "source",
    ["examples.zeitgeist:Zeitgeist", "examples/sessions.py:ActiveSessions", "my_app:Counter"],
)
def test_module_colon_class_names_a_processor(source: str) -> None:
    assert source_kind(source) == "processor"


@pytest.mark.parametrize(
    "source", ["examples/top_events.sql", "missing.sql", "C:/apps/top.sql", "apps:v2/top.sql"]
)
def test_anything_else_names_a_sql_apps_file(source: str) -> None:
    assert source_kind(source) == "sql"


def test_a_file_named_like_module_colon_class_is_a_sql_apps_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("apps:Counter").write_text("CREATE APP counter;")
    assert source_kind("apps:Counter") == "sql"
