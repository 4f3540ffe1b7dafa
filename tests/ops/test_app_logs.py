"""An app's log stays bounded: rotated by size, a set number of older copies kept."""

from pathlib import Path

from millrace.config.settings import Settings
from millrace.ops.app_logs import rotate_if_large

# 1 KiB, so that a few lines fill a log.
SMALL = Settings(logs_max_mb=1 / 1024, logs_keep=2)


def _fill(log: Path, text: str) -> None:
    with log.open("a", encoding="utf-8") as out:
        out.write(text * 1024)


def test_a_full_log_moves_to_app_log_1_and_the_older_copies_up_to_the_number_kept(
    tmp_path: Path,
) -> None:
    log = tmp_path / "app.log"
    for letter in "abc":
        _fill(log, letter)
        assert rotate_if_large(log, SMALL)

    assert log.read_text() == ""
    assert (tmp_path / "app.log.1").read_text() == "c" * 1024
    assert (tmp_path / "app.log.2").read_text() == "b" * 1024
    assert not (tmp_path / "app.log.3").exists()


def test_a_log_under_its_size_is_left_alone(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("one line\n")

    assert not rotate_if_large(log, SMALL)
    assert not rotate_if_large(tmp_path / "no-such.log", SMALL)
    assert log.read_text() == "one line\n"


def test_a_process_appending_to_the_log_writes_on_at_its_start_after_a_rotation(
    tmp_path: Path,
) -> None:
    # As Spark's JVM does: its output is the log, opened for appending when it started.
    log = tmp_path / "app.log"
    with log.open("ab", buffering=0) as jvm:
        jvm.write(b"x" * 2048)
        assert rotate_if_large(log, SMALL)
        jvm.write(b"WARN after the rotation\n")

    assert log.read_bytes() == b"WARN after the rotation\n"
    assert (tmp_path / "app.log.1").read_bytes() == b"x" * 2048


def test_keeping_no_copies_empties_the_log(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    _fill(log, "z")

    assert rotate_if_large(log, Settings(logs_max_mb=1 / 1024, logs_keep=0))
    assert log.read_text() == ""
    assert list(tmp_path.iterdir()) == [log]
