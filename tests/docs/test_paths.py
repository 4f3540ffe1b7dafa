"""Every file of the repository that a docs page names exists, so a move cannot strand a page."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))
_PATH = re.compile(r"`((?:examples|tests|src|benchmarks|docs)/[^` ]+)`")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_path_a_page_names_is_in_the_repository(page: Path) -> None:
    # A pattern such as `benchmarks/results/sql-apps-*.json` must match at least one file.
    missing = [
        path for path in _PATH.findall(page.read_text()) if not any(ROOT.glob(path.rstrip("/")))
    ]
    assert not missing, f"{page.name} names files that are not there: {missing}"


def test_the_pages_name_files() -> None:
    assert sum(len(_PATH.findall(page.read_text())) for page in PAGES) >= 20
