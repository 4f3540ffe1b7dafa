"""Requests an unlucky or curious caller makes: the documents without the token, a bus that is
down, names that do not exist, times written another way, and methods no route takes."""

import json
import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient

from millrace.api.app import create_app
from millrace.config.workspace import Workspace

WINDOWS = [datetime(2026, 1, 1, 12, 0, second, tzinfo=UTC) for second in (0, 10, 20)]


def write_result_table(workspace: Workspace, app: str, table: str) -> None:
    """A result table as a SQL app in mode 'final' leaves it: one Delta commit per window."""
    utc = pa.timestamp("us", tz="UTC")
    for start, topic, n in zip(WINDOWS, ["sports", "music", "sports"], [3, 4, 5], strict=True):
        window = {
            "window_start": pa.array([start], type=utc),
            "window_end": pa.array([start + timedelta(seconds=10)], type=utc),
            "topic": [topic],
            "n": [n],
        }
        write_deltalake(workspace.tables_dir / app / table, pa.table(window), mode="append")


def test_the_openapi_document_and_its_pages_require_the_token_when_the_service_has_one(
    fresh_workspace: Workspace,
) -> None:
    guarded = TestClient(create_app(fresh_workspace, token="s3cret"))
    for path in ("/openapi.json", "/docs", "/redoc"):
        refused = guarded.get(path)
        assert refused.status_code == 401, path
        assert refused.json()["error"]["code"] == "unauthorized"
        assert guarded.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert guarded.get(path, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    document = guarded.get("/openapi.json", headers={"Authorization": "Bearer s3cret"}).json()
    assert "/apps/{app}" in document["paths"]
    assert "bearer" in json.dumps(document["components"]["securitySchemes"]).lower()

    open_service = TestClient(create_app(fresh_workspace))
    assert open_service.get("/openapi.json").status_code == 200
    assert open_service.get("/docs").status_code == 200


def test_with_the_bus_down_each_request_gets_its_503_within_seconds(
    fresh_workspace: Workspace,
) -> None:
    # No broker runs on the workspace's port; an app with a checkpoint makes /apps ask the bus.
    (fresh_workspace.checkpoints_dir / "counter" / "counts").mkdir(parents=True)
    client = TestClient(create_app(fresh_workspace))
    for path in ("/streams", "/streams/clicks", "/apps", "/apps/counter", "/metrics"):
        started = time.monotonic()
        response = client.get(path)
        took = time.monotonic() - started
        assert response.status_code == 503, (path, response.text)
        assert response.json()["error"]["code"] == "bus"
        assert took < 5, f"{path} took {took:.1f} s"


def test_not_found_messages_do_not_show_where_the_workspace_lives(workspace: Workspace) -> None:
    client = TestClient(create_app(workspace))
    folders = (str(workspace.root), str(workspace.root.resolve()))
    for path in ("/apps/no_such_app", "/apps/no_such_app/tables/top"):
        response = client.get(path)
        assert response.status_code == 404, response.text
        assert not any(folder in response.text for folder in folders)
    table = client.get("/apps/no_such_app/tables/top").json()["error"]
    assert table["code"] == "result-table-not-found" and "<workspace>" in table["message"]


@pytest.mark.parametrize(
    "written",
    [
        "2026-01-01T12:00:10Z",
        "2026-01-01T12:00:10.000Z",
        "2026-01-01T12:00:10+00:00",
        "2026-01-01T13:00:10+01:00",
        "2026-01-01T12:00:10",
        "2026-01-01 12:00:10.000000+00:00",
    ],
)
def test_a_time_filter_matches_every_iso_form_of_the_instant(
    fresh_workspace: Workspace, written: str
) -> None:
    write_result_table(fresh_workspace, "ranker", "top")
    client = TestClient(create_app(fresh_workspace))
    every = client.get("/apps/ranker/tables/top").json()
    assert [row["window_start"] for row in every] == [
        "2026-01-01T12:00:00Z",
        "2026-01-01T12:00:10Z",
        "2026-01-01T12:00:20Z",
    ]
    rows = client.get("/apps/ranker/tables/top", params={"window_start": written}).json()
    assert [row["n"] for row in rows] == [4]


def test_time_filters_go_with_the_other_filters_and_last(fresh_workspace: Workspace) -> None:
    write_result_table(fresh_workspace, "ranker", "top")
    client = TestClient(create_app(fresh_workspace))
    route = "/apps/ranker/tables/top"
    # The API's own form of a time, read back from a row, finds that row.
    first = client.get(route).json()[0]
    assert [
        row["n"] for row in client.get(route, params={"window_end": first["window_end"]}).json()
    ] == [3]
    sports = {"topic": "sports", "window_start": "2026-01-01T12:00:20Z"}
    assert [row["n"] for row in client.get(route, params=sports).json()] == [5]
    assert (
        client.get(route, params={"topic": "music", "window_start": "2026-01-01T12:00:20Z"}).json()
        == []
    )
    assert (
        client.get(route, params={"window_start": "2026-01-01T12:00:20Z", "last": 1}).json()[0]["n"]
        == 5
    )
    unknown = client.get(route, params={"nope": "2026-01-01T12:00:20Z"})
    assert unknown.status_code == 400 and "no column 'nope'" in unknown.json()["error"]["message"]


def test_filters_and_last_are_answered_from_the_files_that_hold_those_rows(
    fresh_workspace: Workspace,
) -> None:
    write_result_table(fresh_workspace, "ranker", "top")
    client = TestClient(create_app(fresh_workspace))
    route = "/apps/ranker/tables/top"
    # The first window's file gone from disk: a request that reads every file fails on it.
    folder = fresh_workspace.tables_dir / "ranker" / "top"
    (folder / _file_of(DeltaTable(str(folder)), WINDOWS[0])).unlink()
    assert [row["n"] for row in client.get(route, params={"last": 2}).json()] == [4, 5]
    assert [row["n"] for row in client.get(route, params={"topic": "music"}).json()] == [4]
    assert [row["n"] for row in client.get(route, params={"n": "5"}).json()] == [5]
    assert client.get(route, params={"n": "five"}).json() == []


def _file_of(table: DeltaTable, window_start: datetime) -> str:
    """The data file of `table` that holds the window starting at `window_start`."""
    files = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    [path] = [file["path"] for file in files if file["min.window_start"] == window_start]
    return path


def test_a_method_no_route_takes_gets_405_with_the_allowed_methods(
    fresh_workspace: Workspace,
) -> None:
    client = TestClient(create_app(fresh_workspace))
    for method in ("TRACE", "DELETE", "POST"):
        response = client.request(method, "/apps")
        assert response.status_code == 405
        assert response.headers["allow"] == "GET"
        assert response.json()["error"]["code"] == "http"
