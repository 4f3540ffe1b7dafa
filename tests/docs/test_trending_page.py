"""docs/trending.md quotes the trending example's own code: its excerpts are in the files."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "trending.md"


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_joiner_excerpt_is_the_joiners_sql() -> None:
    [excerpt] = re.findall(r"```sql\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    joiner = _words((ROOT / "examples" / "trending" / "joiner.sql").read_text())
    fragments = [_words(part) for part in excerpt.split("...") if part.strip()]
    assert len(fragments) >= 2
    for fragment in fragments:
        assert fragment in joiner, fragment
