"""Serving-table point lookups over HTTP: the row by key, and 404s that say what is missing."""

import uuid

from fastapi.testclient import TestClient

from millrace.api.app import create_app
from millrace.config.workspace import Workspace
from millrace.serving.tables import TableSpec, create_table, write_rows


def test_a_row_is_read_by_its_key_and_a_missing_one_is_a_404(
    workspace: Workspace, redis_url: str
) -> None:
    name = f"t_{uuid.uuid4().hex[:8]}"
    spec = create_table(
        workspace.settings,
        TableSpec(name, (("dimension_id", "STRING"),), (("topic", "STRING"), ("rank", "BIGINT"))),
    )
    write_rows(
        redis_url, spec, {"dimension_id": ["d1", "d2"], "topic": ["cats", "dogs"], "rank": [1, 2]}
    )
    client = TestClient(create_app(workspace))

    response = client.get(f"/tables/{name}/d2")
    assert response.status_code == 200
    assert response.json() == {"dimension_id": "d2", "topic": "dogs", "rank": 2}

    missing = client.get(f"/tables/{name}/d9")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "row-not-found"
    assert "no row with key 'd9'" in missing.json()["error"]["message"]

    unknown = client.get("/tables/no_such_table/d1")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "table-not-found"


def test_a_table_with_two_key_columns_takes_one_path_segment_per_column(
    workspace: Workspace, redis_url: str
) -> None:
    name = f"t_{uuid.uuid4().hex[:8]}"
    spec = create_table(
        workspace.settings,
        TableSpec(name, (("day", "STRING"), ("user", "STRING")), (("visits", "BIGINT"),)),
    )
    write_rows(redis_url, spec, {"day": ["2026-01-01"], "user": ["u7"], "visits": [3]})
    client = TestClient(create_app(workspace))

    response = client.get(f"/tables/{name}/2026-01-01/u7")
    assert response.status_code == 200
    assert response.json() == {"day": "2026-01-01", "user": "u7", "visits": 3}
    assert client.get(f"/tables/{name}/2026-01-01").status_code == 400
