import pytest

from millrace.config.durations import parse_duration_ms
from millrace.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "milliseconds"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("30 seconds", 30_000),
        ("10m", 600_000),
        ("2 minutes", 120_000),
        ("1 hour", 3_600_000),
        ("3d", 259_200_000),
        ("1.5s", 1_500),
        ("2w", 1_209_600_000),
    ],
)
def test_durations_are_read_in_short_and_long_forms(text: str, milliseconds: int) -> None:
    assert parse_duration_ms(text) == milliseconds


@pytest.mark.parametrize("text", ["", "ten minutes", "5", "3 fortnights", "-1s"])
def test_anything_else_is_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a duration") as raised:
        parse_duration_ms(text, what="retention")
    assert "30s" in raised.value.hint
