"""A processor's pending event-time timers hold its output watermark back, and a restarted
app knows them before its buckets run again (millrace.apps.processors.pending_timers)."""

from pathlib import Path

from millrace.apps.processors.pending_timers import PendingTimers


def test_the_earliest_pending_timer_holds_back_and_a_fired_one_lets_go(tmp_path: Path) -> None:
    timers = PendingTimers(tmp_path / "pending_timers.json")
    assert timers.earliest_ms() is None

    timers.report({0: 20_000, 1: 10_000}, {"counts"})
    assert timers.earliest_ms() == 10_000
    timers.report({1: None}, set())
    assert timers.earliest_ms() == 20_000


def test_a_restarted_app_reads_the_timers_and_streams_of_the_run_before(tmp_path: Path) -> None:
    path = tmp_path / "processor" / "pending_timers.json"
    PendingTimers(path).report({3: 30_000}, {"counts", "alerts"})

    restarted = PendingTimers(path)

    assert restarted.earliest_ms() == 30_000
    assert restarted.streams == {"counts", "alerts"}
