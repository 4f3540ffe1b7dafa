import time
from datetime import UTC, date, datetime

import pytest

from millrace.cli.rows import cell, json_line


def test_times_print_as_iso_8601_utc_with_milliseconds_in_json_and_in_cells() -> None:
    moment = datetime(2026, 1, 1, 12, 0, 5, 250_000, tzinfo=UTC)
    row = {"window_start": moment, "day": date(2026, 1, 1), "top": [{"at": moment}], "n": 3}
    assert json_line(row) == (
        '{"window_start": "2026-01-01T12:00:05.250Z", "day": "2026-01-01", '
        '"top": [{"at": "2026-01-01T12:00:05.250Z"}], "n": 3}'
    )
    assert cell(moment) == "2026-01-01T12:00:05.250Z"
    assert cell(datetime.fromisoformat("2026-01-01T13:00:00+01:00")) == "2026-01-01T12:00:00.000Z"
    assert [cell(None), cell(date(2026, 1, 2)), cell([moment])] == [
        "NULL",
        "2026-01-02",
        '["2026-01-01T12:00:05.250Z"]',
    ]


def test_a_time_without_a_zone_is_the_local_time_spark_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        assert cell(datetime(2026, 1, 1, 13, 0)) == "2026-01-01T12:00:00.000Z"
        assert json_line({"t": datetime(2026, 7, 1, 14, 0)}) == '{"t": "2026-07-01T12:00:00.000Z"}'
    finally:
        monkeypatch.undo()
        time.tzset()
