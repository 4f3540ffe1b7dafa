"""The dashboard in a real browser: with a generator feeding a SQL app and a processor, the
pipeline graph shows them, an app's charts fill and move, the newest result window comes
first, a stream's page shows each bucket's rate and a malformed record with its reason, and
without the token nothing is shown.
Each browser test leaves a screenshot in test-artifacts/dashboard/."""

from datetime import datetime

import httpx
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Page

from millrace.api.app import create_app
from millrace.config.workspace import Workspace
from millrace.warehouse.result_tables import read_result_rows
from tests.api.live_dashboard import MALFORMED, RESULT_TABLE, TOKEN, LivePipeline

APPEAR_MS = 300_000
"""How long an app may take to run its first batches, or a window to close: on the 2-core
machine shared with other test runs they took 60 to 150 s, and longer at its busiest."""


def test_the_pipeline_page_shows_the_apps_and_the_streams_they_read_and_write(
    live_pipeline: LivePipeline, page: Page
) -> None:
    pipeline = live_pipeline
    page.goto(f"{pipeline.url}/ui/")
    for node in (
        f"app:{pipeline.sql_app}",
        f"app:{pipeline.processor}",
        f"stream:{pipeline.stream}",
        f"stream:{pipeline.output}",
    ):
        page.wait_for_selector(f'[data-node="{node}"]', timeout=APPEAR_MS)
    for app in (pipeline.sql_app, pipeline.processor):
        edge = f'[data-source="stream:{pipeline.stream}"][data-target="app:{app}"]'
        page.wait_for_selector(edge, state="attached", timeout=APPEAR_MS)
    page.wait_for_selector(
        f'[data-source="app:{pipeline.processor}"][data-target="stream:{pipeline.output}"]',
        state="attached",
        timeout=APPEAR_MS,
    )

    page.click(f'[data-node="app:{pipeline.sql_app}"] a')
    page.wait_for_url(f"**/ui/apps/{pipeline.sql_app}")
    assert pipeline.sql_app in page.locator("h1").inner_text()


def test_an_apps_charts_have_points_and_move(live_pipeline: LivePipeline, page: Page) -> None:
    page.goto(f"{live_pipeline.url}/ui/apps/{live_pipeline.processor}?span=5m")
    line = 'svg[aria-label="input rows/s"] polyline'
    page.wait_for_selector(line, timeout=APPEAR_MS)
    first = page.get_attribute(line, "points")
    assert int(page.get_attribute(line, "data-points") or 0) >= 1
    # The page fetches itself every 5 s: the time axis ends at now, and new batches come in.
    page.wait_for_function(
        "([selector, before]) => document.querySelector(selector)?.getAttribute('points') "
        "!== before",
        arg=[line, first],
        timeout=20_000,
    )
    for title in (
        "processed rows/s",
        "batch duration (s)",
        "lag (records)",
        "lag (s)",
        "state rows",
    ):
        assert page.locator(f'svg[aria-label="{title}"] polyline').count() >= 1, title


def test_a_result_table_shows_the_newest_window_first(
    live_pipeline: LivePipeline, page: Page, workspace: Workspace
) -> None:
    rows = f"#{RESULT_TABLE} + .panel tbody tr"
    page.goto(f"{live_pipeline.url}/ui/apps/{live_pipeline.sql_app}/results")
    page.wait_for_selector(rows, timeout=APPEAR_MS)
    newest_before = _newest_window_start(workspace, live_pipeline.sql_app)
    page.reload()
    page.wait_for_selector(rows, timeout=APPEAR_MS)
    # Read in one go: the page refreshes itself, and the app closes windows meanwhile.
    shown = page.locator(f"#{RESULT_TABLE} + .panel").evaluate(
        """panel => {
            const column = [...panel.querySelectorAll("th")]
                .map(header => header.innerText).indexOf("window_start");
            return [...panel.querySelectorAll("tbody tr")].map(row => row.cells[column].innerText);
        }"""
    )
    newest_after = _newest_window_start(workspace, live_pipeline.sql_app)
    starts = [datetime.fromisoformat(text) for text in shown]

    assert starts == sorted(starts, reverse=True)
    assert newest_before <= starts[0] <= newest_after


def _newest_window_start(workspace: Workspace, app: str) -> datetime:
    """The start of the newest window in `app`'s result table, read from the table itself."""
    window_start: datetime = read_result_rows(workspace, app, RESULT_TABLE, last=1)[0][
        "window_start"
    ]
    return window_start


def test_a_malformed_record_shows_in_the_dead_letter_view_with_its_reason(
    live_pipeline: LivePipeline, page: Page
) -> None:
    page.goto(f"{live_pipeline.url}/ui/streams/{live_pipeline.stream}")
    reason = page.get_by_text("value is not valid JSON").first
    reason.wait_for(timeout=APPEAR_MS)
    row = page.locator("tr", has=reason)
    cells = row.locator("td").all_inner_texts()
    # arrived, reason, source stream, source bucket, source offset, the record as it came
    assert cells[2] == live_pipeline.stream
    assert cells[3].isdigit() and cells[4].isdigit()
    assert cells[5] == MALFORMED.decode()


def test_a_streams_page_shows_the_records_each_bucket_gets_per_second(
    live_pipeline: LivePipeline, page: Page
) -> None:
    page.goto(f"{live_pipeline.url}/ui/streams/{live_pipeline.stream}")
    buckets = page.locator("h2:text-is('Buckets') + .panel")
    column = buckets.locator("th").all_inner_texts().index("records/s, last minute")
    rates = [
        float(row.locator("td").nth(column).inner_text())
        for row in buckets.locator("tbody tr").all()
    ]

    assert len(rates) == 2
    # The generator publishes twenty events a second at most, over both buckets.
    assert 0 < sum(rates) <= 21


def test_without_the_token_nothing_is_shown_and_with_it_in_the_fragment_the_pages_are(
    live_pipeline: LivePipeline, page: Page
) -> None:
    guarded = live_pipeline.guarded_url
    refused = page.goto(f"{guarded}/ui/")
    assert refused is not None and refused.status == 401
    assert page.locator("form#login").is_visible()
    assert live_pipeline.sql_app not in page.content()
    assert httpx.get(f"{guarded}/pipeline").status_code == 401
    assert httpx.get(f"{guarded}/ui/apps/{live_pipeline.sql_app}").status_code == 401

    page.fill("form#login input", "wrong")
    page.click("form#login button")
    page.locator(".refused").wait_for()

    page.goto("about:blank")
    page.goto(f"{guarded}/ui/#token={TOKEN}")
    page.wait_for_selector(f'[data-node="app:{live_pipeline.sql_app}"]', timeout=APPEAR_MS)
    # The script keeps the token and takes it out of the address bar.
    assert TOKEN not in page.url


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/ui/apps/no_such_app", "no app 'no_such_app'"),
        ("/ui/apps/no_such_app/results", "no app 'no_such_app'"),
        ("/ui/streams/no.such.stream", "no stream 'no.such.stream'"),
        ("/ui/apps/no_such_app?span=forever", "no app 'no_such_app'"),
    ],
)
def test_an_unknown_name_gets_a_page_that_says_so(
    workspace: Workspace, path: str, says: str
) -> None:
    response = TestClient(create_app(workspace)).get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert says in response.text.replace("&#x27;", "'")
