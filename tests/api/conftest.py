"""Fixtures of the dashboard's browser tests: one live pipeline for the module, headless
Chromium (Debian's `chromium`, driven by Playwright), and a tab that leaves a screenshot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page
from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from tests.api.live_dashboard import LivePipeline, live_pipeline_running
from tests.chromium import REPOSITORY, chromium

ARTIFACTS = REPOSITORY / "test-artifacts" / "dashboard"
"""Where each browser test leaves its screenshot (gitignored)."""


@pytest.fixture(scope="module")
def live_pipeline(spark: SparkSession, workspace: Workspace) -> Iterator[LivePipeline]:
    with live_pipeline_running(spark, workspace) as pipeline:
        yield pipeline


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, as scripts/setup.sh installs it."""
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser tab; its screenshot goes to test-artifacts/dashboard/ at the end."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    yield tab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()
