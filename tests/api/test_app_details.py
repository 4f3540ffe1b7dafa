"""An app's last error for its dashboard page: the last line of its log that tells of an
error, with the lines before and after, read from the end of the log only."""

from pathlib import Path

from millrace.api.app_details import LOG_TAIL_BYTES, find_last_error


def test_the_last_error_comes_with_the_lines_around_it(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    lines = [f"batch {n} done" for n in range(30)]
    lines[10] = "error[sql]: an old failure"
    lines[20] = "ValueError: boom is not a query"
    log.write_text("\n".join(lines) + "\n")

    found = find_last_error(log)

    assert found is not None
    assert found.lines[found.error_index] == "ValueError: boom is not a query"
    assert found.lines[0] == "error[sql]: an old failure"
    assert found.lines[-1] == "batch 25 done"


def test_a_long_log_is_read_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    early = "Traceback (most recent call last): long ago\n"
    filler = "batch done\n" * (LOG_TAIL_BYTES // len("batch done\n") + 10)
    log.write_text(early + filler)

    assert find_last_error(log) is None


def test_a_log_without_errors_or_no_log_has_no_last_error(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("batch 0 done\nbatch 1 done\n")
    assert find_last_error(log) is None
    assert find_last_error(tmp_path / "missing.log") is None
