"""examples/sessions.py against plain Python: sessions, their ends, and the active count."""

import random

from millrace.testing import ProcessorTester
from tests.examples import load_example

ActiveSessions = load_example("sessions").ActiveSessions

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch milliseconds
TIMEOUT_MS = 30_000
LATENESS_MS = 10_000
MOST_DELAY_MS = LATENESS_MS - 2_000  # events come out of order, but none is late
BATCH_MS = 2_000
CLOSING_SESSION = "end-of-test"


def video_events(rng: random.Random, sessions: int) -> list[dict]:
    """Each client joins, then sends heartbeats at gaps of 1 to 40 s (so some time out),
    sometimes joins again, and exits or falls silent; a few send a heartbeat before joining."""
    events = []
    for number in range(sessions):
        session = f"s{number}"
        time = T0 + rng.randrange(300_000)
        if rng.random() < 0.2:
            events.append({"session": session, "event": "heartbeat", "time": time})
            time += rng.randrange(1_000, 5_000)
        events.append({"session": session, "event": "join", "time": time})
        for _ in range(rng.randrange(8)):
            time += rng.randrange(1_000, 40_000)
            event = rng.choices(["heartbeat", "join"], weights=[5, 1])[0]
            events.append({"session": session, "event": event, "time": time})
        if rng.random() < 0.5:
            time += rng.randrange(1_000, 40_000)
            events.append({"session": session, "event": "exit", "time": time})
    return events


def micro_batches(events: list[dict], rng: random.Random) -> list[list[dict]]:
    """The events as they arrive: each up to MOST_DELAY_MS after its event time, gathered in
    micro-batches of BATCH_MS of arrival time, then the closing event."""
    arrivals = sorted(
        (event["time"] + rng.randrange(MOST_DELAY_MS), index, event)
        for index, event in enumerate(events)
    )
    batches: dict[int, list[dict]] = {}
    for arrival, _, event in arrivals:
        batches.setdefault(arrival // BATCH_MS, []).append(event)
    return [batches[batch] for batch in sorted(batches)] + [[closing_event(events)]]


def closing_event(events: list[dict]) -> dict:
    """An event an hour after all `events`, of a session never joined: it moves the watermark
    past every event and timeout, and changes nothing."""
    latest = max(event["time"] for event in events)
    return {"session": CLOSING_SESSION, "event": "heartbeat", "time": latest + 3_600_000}


def run(batches: list[list[dict]]) -> ProcessorTester:
    tester = ProcessorTester(ActiveSessions)
    for batch in batches:
        tester.feed("video_events", batch)
        tester.run_batch()
    tester.fire_timers()
    return tester


def expected_changes(events: list[dict]) -> list[dict]:
    """Plain Python: walk each client's events in event-time order; a join starts a session,
    an exit or 30 s without events ends it; events outside a session do nothing."""
    changes = []
    for session in sorted({event["session"] for event in events}):
        started = last = None
        ordered = sorted(
            (event for event in events if event["session"] == session),
            key=lambda event: event["time"],
        )
        for event in ordered:
            if started is not None and event["time"] > last + TIMEOUT_MS:
                changes.append(ended(session, "timeout", started, last + TIMEOUT_MS))
                started = None
            if started is None:
                if event["event"] != "join":
                    continue
                started = event["time"]
                changes.append({"session": session, "change": "started", "time": started})
            if event["event"] == "exit":
                changes.append(ended(session, "exit", started, event["time"]))
                started = None
            else:
                last = event["time"]
        if started is not None:
            changes.append(ended(session, "timeout", started, last + TIMEOUT_MS))
    return changes


def ended(session: str, reason: str, started: int, time: int) -> dict:
    return {
        "session": session,
        "change": "ended",
        "reason": reason,
        "time": time,
        "duration_ms": time - started,
    }


def in_order(changes: list[dict]) -> list[dict]:
    return sorted(changes, key=lambda change: (change["session"], change["time"]))


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
