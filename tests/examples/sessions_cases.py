"""examples/sessions.py's cases: video events as they arrive, and in plain Python the
session starts and ends the example must give for them.

The example's own tests (tests/examples/test_sessions.py) and its live run
(tests/apps/processors/test_examples.py) share them.
"""

import random

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
