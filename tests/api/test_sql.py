"""`POST /sql` and the query page's HTML: a query over a real Delta result table answers as
plain Python computes it, a write is refused, a bad query points at its line and column, an
answer over the row limit and a query over the time limit stop with a message, and with a
token nothing runs without it. docs/monitoring.md's session is the route's answer."""

import re
import shlex
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from millrace.api.app import create_app
from millrace.config.workspace import Workspace
from millrace.warehouse.result_tables import read_result_rows
from tests.api.sql_tables import (
    APP,
    NUMBERS,
    REGIONS,
    START,
    TABLE,
    VIEW,
    write_numbers_table,
    write_orders_table,
)

MONITORING_PAGE = Path(__file__).parents[2] / "docs" / "monitoring.md"


@pytest.fixture
def client(fresh_workspace: Workspace) -> TestClient:
    write_orders_table(fresh_workspace)
    return TestClient(create_app(fresh_workspace))


def test_a_query_over_a_result_table_answers_as_plain_python_computes_it(
    fresh_workspace: Workspace,
) -> None:
    rows = write_orders_table(fresh_workspace)
    query = f"""
        SELECT window_start, SUM(orders) AS orders, MAX(revenue) AS top_revenue
        FROM {VIEW}
        WHERE window_start >= TIMESTAMP '2026-01-01 12:10:00'
        GROUP BY window_start
        ORDER BY window_start"""

    response = TestClient(create_app(fresh_workspace)).post("/sql", json={"query": query})

    assert response.status_code == 200, response.text
    answer = response.json()
    expected = [
        {
            "window_start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "orders": sum(row["orders"] for row in rows if row["window_start"] == start),
            "top_revenue": max(row["revenue"] for row in rows if row["window_start"] == start),
        }
        for start in sorted({row["window_start"] for row in rows})
        if start.minute >= 10
    ]
    assert answer["rows"] == expected
    assert answer["columns"] == ["window_start", "orders", "top_revenue"]
    assert (answer["engine"], answer["time_column"], answer["complete"]) == (
        "duckdb",
        "window_start",
        True,
    )


def test_values_come_as_json_carries_them(client: TestClient) -> None:
    query = (
        "SELECT region, DATE '2026-01-02' AS day, CAST(2.50 AS DECIMAL(6, 2)) AS price, "
        "CAST(NULL AS INT) AS nothing, array(1, 2) AS pair, window_end "
        f"FROM {VIEW} WHERE window_start = TIMESTAMP '2026-01-01 12:00:00' ORDER BY region"
    )

    answer = client.post("/sql", json={"query": query}).json()

    assert answer["rows"][0] == {
        "region": "eu",
        "day": "2026-01-02",
        "price": 2.5,
        "nothing": None,
        "pair": [1, 2],
        "window_end": "2026-01-01T12:01:00Z",
    }
    # The first column of times or dates is the one a chart runs along.
    assert answer["time_column"] == "day"


@pytest.mark.parametrize(
    "statement",
    [
        f"DROP TABLE {VIEW}",
        f"DELETE FROM {VIEW}",
        f"INSERT INTO {VIEW} SELECT * FROM {VIEW}",
        f"  -- a comment first\n  UPDATE {VIEW} SET orders = 0",
        "COPY (SELECT 1) TO 'copied.csv'",
        f"SELECT 1; DROP TABLE {VIEW}",
    ],
)
def test_a_write_statement_is_refused_and_the_table_keeps_its_rows(
    client: TestClient, fresh_workspace: Workspace, statement: str
) -> None:
    response = client.post("/sql", json={"query": statement})

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "sql"
    assert error["message"].startswith("<query>:1:1: ")
    assert error["hint"]
    assert len(read_result_rows(fresh_workspace, APP, TABLE)) == 30 * len(REGIONS)
    assert not Path("copied.csv").exists()


def test_a_bad_query_is_a_400_at_its_line_and_column(client: TestClient) -> None:
    response = client.post("/sql", json={"query": f"SELECT region,\n  nope FROM {VIEW}"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "sql"
    assert error["message"].startswith("<query>:2:3: ")
    assert "nope" in error["message"] and "DESCRIBE" in error["hint"]

    unknown = client.post("/sql", json={"query": "SELECT * FROM no_such_table"}).json()["error"]
    assert unknown["message"].startswith("<query>:1:15: ")
    assert VIEW in unknown["hint"]


def test_an_answer_over_the_row_limit_is_a_422_with_no_rows(client: TestClient) -> None:
    every_row = {"query": f"SELECT * FROM {VIEW}", "limit": 59}

    response = client.post("/sql", json=every_row)

    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "sql-limit",
        "message": "the answer has more than 59 rows; add a LIMIT or aggregate",
        "hint": 'or ask for more rows with "limit" (at most 10,000)',
    }
    assert len(client.post("/sql", json={**every_row, "limit": 60}).json()["rows"]) == 60
    too_many = client.post("/sql", json={**every_row, "limit": 10_001})
    assert too_many.status_code == 400 and too_many.json()["error"]["code"] == "bad-request"


def test_a_query_over_the_time_limit_is_stopped_with_a_422(fresh_workspace: Workspace) -> None:
    write_numbers_table(fresh_workspace)
    hurried = replace(
        fresh_workspace, settings=replace(fresh_workspace.settings, sql_time_limit_s=0.5)
    )
    client = TestClient(create_app(hurried))
    # 8 billion rows: DuckDB takes minutes over them.
    query = f"SELECT SUM(a.n * b.n + c.n) AS total FROM {NUMBERS} a, {NUMBERS} b, {NUMBERS} c"

    started = time.monotonic()
    response = client.post("/sql", json={"query": query})
    took = time.monotonic() - started

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "sql-limit"
    assert "time limit of 0.5 s" in error["message"]
    assert took < 10, f"stopped after {took:.1f} s"


def test_tables_too_big_for_the_service_are_a_422_naming_spark(
    fresh_workspace: Workspace,
) -> None:
    write_orders_table(fresh_workspace)
    small = replace(fresh_workspace, settings=replace(fresh_workspace.settings, sql_local_max_mb=0))

    response = TestClient(create_app(small)).post(
        "/sql", json={"query": f"SELECT COUNT(*) AS n FROM {VIEW}"}
    )

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "sql-size"
    assert "more than sql.local_max_mb (0)" in error["message"]
    assert "millrace sql --spark" in error["hint"]


def test_with_a_token_the_route_and_the_page_need_it(fresh_workspace: Workspace) -> None:
    write_orders_table(fresh_workspace)
    guarded = TestClient(create_app(fresh_workspace, token="s3cret"))
    query = {"query": f"SELECT COUNT(*) AS n FROM {VIEW}"}

    refused = guarded.post("/sql", json=query)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    wrong = guarded.post("/sql", json=query, headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 401
    allowed = guarded.post("/sql", json=query, headers={"Authorization": "Bearer s3cret"})
    assert allowed.json()["rows"] == [{"n": 30 * len(REGIONS)}]

    page = guarded.get("/ui/query")
    assert page.status_code == 401 and "form" in page.text and VIEW not in page.text


def test_the_route_is_in_the_openapi_document_with_its_limits(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/sql"]["post"]
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    limit = schemas["SqlRequest"]["properties"]["limit"]

    assert (limit["default"], limit["minimum"], limit["maximum"]) == (1000, 1, 10_000)
    assert "sql-limit" in operation["responses"]["422"]["description"]
    assert {"400", "401", "200"} <= set(operation["responses"])
    assert schemas["SqlAnswer"]["examples"][0]["time_column"] == "window_start"


def test_the_query_page_lists_the_tables_and_loads_nothing_from_the_network(
    client: TestClient,
) -> None:
    response = client.get("/ui/query")

    assert response.status_code == 200
    html = response.text
    assert 'href="/ui/query"' in html  # in the navigation of every page
    assert f'data-table="{VIEW}"' in html and f"result table {TABLE} of app {APP}" in html
    assert '<form id="query">' in html and 'value="1000"' in html
    assert not re.search(r"<(script|link|img)[^>]*\b(src|href)=", html)
    assert 'href="/ui/query"' in client.get("/ui/alerts").text


def test_the_documented_session_is_the_routes_answer(client: TestClient) -> None:
    # docs/monitoring.md: a curl command with its request body, then the answer it printed.
    [session] = re.findall(r"```console\n\$ (curl .*?)```", MONITORING_PAGE.read_text(), re.S)
    command, printed = _joined(session)
    words = shlex.split(command)
    body = words[words.index("-d") + 1]

    response = client.post("/sql", content=body, headers={"Content-Type": "application/json"})

    assert response.text == printed.strip()
    assert START.isoformat().replace("+00:00", "Z") in printed


def _joined(session: str) -> tuple[str, str]:
    """The command of `session` (its lines continued with backslashes joined), and the rest."""
    lines = session.split("\n")
    end = next(n for n, line in enumerate(lines) if not line.endswith("\\"))
    command = " ".join(line.rstrip("\\").strip() for line in lines[: end + 1])
    return command, "\n".join(lines[end + 1 :])
