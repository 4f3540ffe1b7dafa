"""The dashboard's query page in a real browser: a query typed over a result table with a time
column shows its rows and a chart of them (its lines' points, and the chart's pixels in a
screenshot), a bad query shows its message and hint, an answer over the row limit says so,
and behind a token the page sends it. With MILLRACE_DOCS_SCREENSHOT=1 the first test writes
docs/dashboard-query.png. Each test leaves a screenshot in test-artifacts/dashboard/."""

import struct
import zlib
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page

from millrace.api.app import background_service
from millrace.config.workspace import Workspace
from tests.api.sql_tables import MINUTES, REGIONS, VIEW, orders_rows, write_orders_table
from tests.chromium import REPOSITORY, wants_docs_screenshot
from tests.ports import free_port

TOKEN = "s3cret-query"
DOCS_PICTURE = REPOSITORY / "docs" / "dashboard-query.png"
"""docs/dashboard.md's picture of the query page, written when MILLRACE_DOCS_SCREENSHOT=1."""
QUERY = f"SELECT window_start, region, orders\nFROM {VIEW}\nORDER BY window_start, region"
SERIES = {"orders · eu": (0x2B, 0x6C, 0xB0), "orders · us": (0xD6, 0x9E, 0x2E)}
"""Each line of the chart and the colour the stylesheet draws it in (series-0, series-1)."""


@pytest.fixture
def service(fresh_workspace: Workspace) -> Iterator[str]:
    """The service over HTTP, on loopback without a token, with the orders table."""
    write_orders_table(fresh_workspace)
    with background_service(fresh_workspace, host="127.0.0.1", port=free_port()) as url:
        yield url


@pytest.fixture
def guarded_service(fresh_workspace: Workspace) -> Iterator[str]:
    """The service over HTTP with `TOKEN`, with the orders table."""
    write_orders_table(fresh_workspace)
    with background_service(
        fresh_workspace, host="127.0.0.1", port=free_port(), token=TOKEN
    ) as url:
        yield url


def test_a_query_shows_its_rows_and_chart_and_a_bad_one_its_error(service: str, page: Page) -> None:
    page.goto(f"{service}/ui/query")
    page.fill("form#query textarea", QUERY)
    page.click("form#query button[type=submit]")
    page.wait_for_selector("#query-table tbody tr")

    rows = [row.locator("td").all_inner_texts() for row in page.locator("#query-table tr").all()]
    expected = sorted(
        (row["window_start"].strftime("%Y-%m-%dT%H:%M:%SZ"), row["region"], str(row["orders"]))
        for row in orders_rows()
    )
    assert page.locator("#query-table th").all_inner_texts() == ["window_start", "region", "orders"]
    assert [tuple(cells) for cells in rows[1:]] == expected
    assert page.locator("#query-summary").inner_text() == f"{MINUTES * len(REGIONS)} rows · duckdb"

    chart = page.locator("#query-chart svg")
    assert chart.get_attribute("data-lines") == str(len(REGIONS))
    lines = chart.locator("polyline")
    assert [line.locator("title").text_content() for line in lines.all()] == list(SERIES)
    for line in lines.all():
        assert line.get_attribute("data-points") == str(MINUTES)
        assert len((line.get_attribute("points") or "").split()) == MINUTES
    # The lines are on screen: each in its colour (its legend alone has about 150 pixels of it).
    pixels = _pixels(chart.screenshot())
    for label, colour in SERIES.items():
        drawn = sum(1 for pixel in pixels if _near(pixel, colour))
        assert drawn >= 1_000, f"{label}: {drawn} pixels of its colour"
    if wants_docs_screenshot():
        page.screenshot(path=str(DOCS_PICTURE))

    page.fill("form#query textarea", f"SELECT region,\n  nope FROM {VIEW}")
    page.click("form#query button[type=submit]")
    error = page.locator("#query-error")
    error.wait_for()
    assert error.locator(".message").inner_text().startswith("<query>:2:3: ")
    assert "nope" in error.locator(".message").inner_text()
    assert "DESCRIBE" in error.locator(".hint").inner_text()
    assert page.locator("#query-answer").is_hidden()


def test_behind_a_token_the_page_sends_it_and_the_row_limit_shows(
    guarded_service: str, page: Page
) -> None:
    page.goto(f"{guarded_service}/ui/query#token={TOKEN}")
    # The dashboard's script fetches the page with the token and swaps it in.
    page.wait_for_selector("form#query", timeout=10_000)
    page.fill("form#query textarea", f"SELECT COUNT(*) AS n FROM {VIEW}")
    page.click("form#query button[type=submit]")
    page.wait_for_selector("#query-table tbody tr")
    assert page.locator("#query-table tbody td").all_inner_texts() == [str(MINUTES * len(REGIONS))]
    assert page.locator("#query-chart svg").count() == 0  # no time column, no chart

    page.fill("form#query input[name=limit]", "10")
    page.fill("form#query textarea", QUERY)
    page.click("form#query button[type=submit]")
    page.locator("#query-error").wait_for()
    assert page.locator("#query-error .message").inner_text() == (
        "the answer has more than 10 rows; add a LIMIT or aggregate"
    )


def _near(pixel: tuple[int, ...], colour: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 24 for a, b in zip(pixel, colour, strict=True))


def _pixels(png: bytes) -> list[tuple[int, ...]]:
    """The RGB of each pixel of an 8-bit RGB or RGBA PNG (as Chromium's screenshots are)."""
    width = height = channels = 0
    data = b""
    at = 8  # past the signature
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour_type in (2, 6), (depth, colour_type)
            channels = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            data += body
        at += 12 + length
    raw = zlib.decompress(data)
    stride = width * channels
    previous = bytearray(stride)
    pixels: list[tuple[int, ...]] = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            line[x] = (line[x] + _predict(kind, left, up, corner)) & 0xFF
        pixels += [tuple(line[x : x + 3]) for x in range(0, stride, channels)]
        previous = line
    return pixels


def _predict(kind: int, left: int, up: int, corner: int) -> int:
    """PNG's filter `kind` predicting a byte from its neighbours (RFC 2083, 6.6)."""
    if kind == 0:
        return 0
    if kind == 1:
        return left
    if kind == 2:
        return up
    if kind == 3:
        return (left + up) // 2
    guess = left + up - corner
    near = min((abs(guess - left), 0), (abs(guess - up), 1), (abs(guess - corner), 2))[1]
    return (left, up, corner)[near]
