"""The suite's order by duration (`tests/durations.py`) names test files that exist."""

from pathlib import Path

from tests.durations import SECONDS_BY_FILE


def test_every_file_the_durations_name_exists_so_a_move_cannot_leave_them_stale() -> None:
    root = Path(__file__).parents[1]
    missing = [name for name in SECONDS_BY_FILE if not (root / name).is_file()]
    assert not missing, f"tests/durations.py names files that do not exist: {missing}"
