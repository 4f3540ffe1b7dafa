"""examples/sessions.py against plain Python: sessions, their ends, and the active count."""

import random

from millrace.testing import ProcessorTester
from tests.examples.sessions_cases import (
    T0,
    ActiveSessions,
    closing_event,
    expected_changes,
    in_order,
    micro_batches,
    video_events,
)


def run(batches: list[list[dict]]) -> ProcessorTester:
    tester = ProcessorTester(ActiveSessions)
    for batch in batches:
        tester.feed("video_events", batch)
        tester.run_batch()
    tester.fire_timers()
    return tester


def test_sessions_start_at_join_and_end_at_exit_or_timeout_with_their_duration() -> None:
    rng = random.Random(7)
    events = video_events(rng, sessions=60)
    tester = run(micro_batches(events, rng))

    assert tester.late == []
    changes = tester.values("session_changes")
    assert in_order(changes) == in_order(expected_changes(events))
    reasons = {change.get("reason") for change in changes}
    assert reasons == {None, "exit", "timeout"}, "the scenario ends sessions both ways"


def test_active_session_count_over_time_is_the_running_sum_of_the_deltas() -> None:
    rng = random.Random(11)
    events = video_events(rng, sessions=60)
    tester = run(micro_batches(events, rng))

    deltas = tester.values("active_session_deltas")
    sessions = active_intervals(expected_changes(events))
    # The count only changes when a session starts or ends: look just before and at each.
    changes = {time for interval in sessions for time in interval}
    for instant in sorted(changes | {time - 1 for time in changes}):
        active = sum(1 for start, end in sessions if start <= instant < end)
        assert sum(delta["delta"] for delta in deltas if delta["time"] <= instant) == active
    most_at_once = max(
        sum(1 for start, end in sessions if start <= instant < end) for instant in changes
    )
    assert most_at_once > 5, "the scenario overlaps many sessions"
    assert sum(delta["delta"] for delta in deltas) == 0


def active_intervals(changes: list[dict]) -> list[tuple[int, int]]:
    """The (start, end) of each session, from changes listed per session in time order."""
    intervals = []
    for change in changes:
        if change["change"] == "started":
            start = change["time"]
        else:
            intervals.append((start, change["time"]))
    return intervals


def test_events_apply_in_event_time_order_whatever_order_they_arrive_in() -> None:
    tester = ProcessorTester(ActiveSessions)
    # The exit arrives first, the join last: applied by arrival they would start nothing.
    tester.feed(
        "video_events",
        [
            {"session": "s1", "event": "exit", "time": T0 + 20_000},
            {"session": "s1", "event": "heartbeat", "time": T0 + 10_000},
            {"session": "s1", "event": "join", "time": T0},
        ],
    )
    tester.run_batch()
    tester.advance_watermark(T0 + 20_000)
    tester.fire_timers()

    assert tester.values("session_changes") == [
        {"session": "s1", "change": "started", "time": T0},
        {
            "session": "s1",
            "change": "ended",
            "reason": "exit",
            "time": T0 + 20_000,
            "duration_ms": 20_000,
        },
    ]
    assert tester.state("s1") == {"waiting_events": [], "started_ms": None}
    assert tester.timers("s1") == []


def test_each_event_restarts_the_timeout_even_one_exactly_30_s_after_the_last() -> None:
    tester = ProcessorTester(ActiveSessions)
    tester.feed("video_events", [{"session": "s1", "event": "join", "time": T0}])
    tester.run_batch()
    tester.advance_watermark(T0)
    tester.fire_timers()
    assert tester.values("session_changes") == [{"session": "s1", "change": "started", "time": T0}]
    # The heartbeat waits for the watermark exactly when the timeout does, and wins.
    tester.feed("video_events", [{"session": "s1", "event": "heartbeat", "time": T0 + 30_000}])
    tester.run_batch()
    tester.advance_watermark(T0 + 59_999)
    tester.fire_timers()
    assert len(tester.values("session_changes")) == 1

    tester.advance_watermark(T0 + 60_000)
    tester.fire_timers()
    assert tester.values("session_changes")[-1] == {
        "session": "s1",
        "change": "ended",
        "reason": "timeout",
        "time": T0 + 60_000,
        "duration_ms": 60_000,
    }


def test_an_event_arriving_after_a_later_one_still_restarts_the_timeout_in_time() -> None:
    tester = ProcessorTester(ActiveSessions)
    tester.feed("video_events", [{"session": "s1", "event": "join", "time": T0}])
    tester.run_batch()
    tester.advance_watermark(T0)
    tester.fire_timers()
    tester.feed(
        "video_events",
        [
            {"session": "s1", "event": "heartbeat", "time": T0 + 35_000},
            {"session": "s1", "event": "heartbeat", "time": T0 + 25_000},
        ],
    )
    tester.run_batch()
    tester.advance_watermark(T0 + 64_999)
    tester.fire_timers()

    assert [change["change"] for change in tester.values("session_changes")] == ["started"]
    assert tester.timers("s1")[0].time_ms == T0 + 65_000


def test_a_catch_up_micro_batch_hours_long_applies_every_event_without_stopping() -> None:
    # After downtime, one micro-batch may hold hours of events, and the watermark then jumps
    # over more event times than a key may fire timers in one micro-batch. The client falls
    # silent for a minute after the first hour, so its session times out, and it joins again.
    hour = 3_600_000
    events = [
        {"session": "s1", "event": "join", "time": T0},
        *(
            {"session": "s1", "event": "heartbeat", "time": T0 + time}
            for time in range(1_000, hour, 1_000)
        ),
        {"session": "s1", "event": "heartbeat", "time": T0 + hour + 60_000},
        {"session": "s1", "event": "join", "time": T0 + hour + 61_000},
        *(
            {"session": "s1", "event": "heartbeat", "time": T0 + time}
            for time in range(hour + 62_000, 3 * hour, 1_000)
        ),
        {"session": "s1", "event": "exit", "time": T0 + 3 * hour},
    ]
    tester = run([events, [closing_event(events)]])

    changes = tester.values("session_changes")
    assert changes == expected_changes(events)
    assert [change.get("reason") for change in changes] == [None, "timeout", None, "exit"]


def test_one_micro_batch_then_the_watermark_at_the_end_gives_the_same_changes() -> None:
    """As a batch run does it: the changes of a run in many micro-batches."""
    rng = random.Random(3)
    events = video_events(rng, sessions=60)
    batches = micro_batches(events, rng)
    streamed = run(batches)
    at_once = ProcessorTester(ActiveSessions)
    at_once.feed("video_events", [event for batch in batches[:-1] for event in batch])
    at_once.run_batch()
    at_once.advance_watermark(batches[-1][0]["time"])
    at_once.fire_timers()

    for stream in ("session_changes", "active_session_deltas"):
        assert in_order(at_once.values(stream)) == in_order(streamed.values(stream))
    assert in_order(at_once.values("session_changes")) == in_order(expected_changes(events))
