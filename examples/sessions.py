"""Active video sessions: the `track` operator of D-Streams, as a processor with a 30 s timeout.

Section 3.3 of `discretized-streams.txt` tracks the active sessions of a video service: a
session starts when a client joins and ends when it exits, or when nothing was heard from it
for 30 seconds; then it counts the active sessions. `ActiveSessions` reads the stream
`video_events`, records like `{"session": "s1", "event": "join", "time": 1767225600000}` (or
ISO-8601 times), keyed by the session. `event` is `"join"`, `"exit"`, or anything else (a
`"heartbeat"`, a bitrate change): a sign of life that keeps a started session going.

Per session, in event-time order:

- a `join` starts the session, unless it is already going (a repeated join is a sign of life);
- every event of a started session restarts its timeout: an event-time timer `timeout` at
  the event's time plus `timeout_seconds`, replacing the previous one;
- an `exit` ends it (reason `"exit"`), at the exit's time;
- the timeout ends it (reason `"timeout"`) at the last event's time plus `timeout_seconds`:
  the session counted as active until then. An event exactly `timeout_seconds` after the
  previous one still keeps the session going.
- Events of a session that has not started (a heartbeat or an exit before any join, or after
  the session ended) start nothing and are ignored.

Records arrive out of order, and a processor sees them in arrival order. So that an exit that
arrives before a later-dated heartbeat, or a join that arrives after its session's first
heartbeat, is still applied in event-time order, each event waits in `waiting_events` until
the watermark passes it: an event-time timer `apply` at the oldest waiting event's time fires
then, and applies every waiting event the watermark has passed, in time order, ending the
session by timeout first when the next event comes more than `timeout_seconds` after the
last. The price is latency: a change is known `lateness` after the event that caused it.

Productions, all keyed by the session, at the time of the change:

- `session_changes`: `{"session", "change": "started", "time"}` and
  `{"session", "change": "ended", "reason": "exit" | "timeout", "time", "duration_ms"}`, the
  duration running from the join to the end.
- `active_session_deltas`: `{"session", "delta": 1 | -1, "time"}`, +1 when a session starts
  and -1 when it ends.

The count of active sessions is global, and a processor sees one key (one session) at a time:
no callback can read or hold a count over all sessions. So the processor produces each
session's contribution, +1 then -1, and the count at time t is the sum of the deltas dated up
to t. A reader of `active_session_deltas` keeps that running sum; a SQL app sums the changes
per window, and the count is the running sum of its rows:

    CREATE APPLICATION active_session_count;
    CREATE INPUT TABLE deltas (session STRING, delta INT)
      FROM STREAM('active_session_deltas') TIME time LATENESS '10 seconds';
    CREATE TABLE session_changes_per_second AS
    SELECT SUM(delta) AS change FROM deltas [1 second];

Run its test, in memory and without Spark or Kafka:
`.venv/bin/pytest -q tests/examples/test_sessions.py`. On live
streams: `millrace run examples/sessions.py:ActiveSessions`; in batch over a stored range:
`millrace run examples/sessions.py:ActiveSessions --batch --from T --to T`
(`tests/apps/processors/test_examples.py` runs both, with a kill -9 mid-stream).

Example:
    >>> from millrace.testing import ProcessorTester
    >>> tester = ProcessorTester(ActiveSessions)
    >>> _ = tester.feed("video_events", [
    ...     {"session": "s1", "event": "join", "time": 1_767_225_600_000},
    ...     {"session": "s1", "event": "exit", "time": 1_767_225_660_000}])
    >>> _ = tester.run_batch()
    >>> tester.advance_watermark(1_767_225_660_000)
    >>> _ = tester.fire_timers()
    >>> [delta["delta"] for delta in tester.values("active_session_deltas")]
    [1, -1]
"""

# Processor classes declare `inputs` as a list, the way the Processor API documents them.
# ruff: noqa: RUF012

from __future__ import annotations

from typing import Any

from millrace import Input, ListState, Processor, ValueState
from millrace.processor import Context, Timer

# Timers of equal time fire in tag order, and "apply" sorts before "timeout": an event at the
# very instant of the timeout is applied first and keeps its session going.
APPLY_TIMER = "apply"
TIMEOUT_TIMER = "timeout"


class ActiveSessions(Processor):
    """Video sessions from join, exit and other events, with a timeout; changes and deltas.

    Example:
        >>> ActiveSessions.kind()
        'stateful'
    """

    name = "active_sessions"
    inputs = [Input("video_events", key="session", time="time", lateness="10s")]
    changes_stream = "session_changes"
    """The stream of sessions' starts and ends (a subclass may rename it, as the live tests do)."""
    deltas_stream = "active_session_deltas"
    """The stream of +1 and -1 changes of the count of active sessions."""

    timeout_seconds = 30
    """Seconds without an event after which a started session ends."""

    waiting_events = ListState(dict)
    started_ms = ValueState(int)

    def on_record(self, key: str, record: dict[str, Any], ctx: Context) -> None:
        """Hold the event until the watermark passes it, so that events apply in time order.

        Example:
            >>> sessions.on_record("s1", {"event": "join"}, ctx)  # doctest: +SKIP
        """
        self.waiting_events.append({"time": ctx.event_time_ms, "event": record.get("event")})
        pending = ctx.timer(APPLY_TIMER)
        if pending is None or ctx.event_time_ms < pending.time_ms:
            ctx.set_timer(APPLY_TIMER, event_time_ms=ctx.event_time_ms)

    def on_timer(self, key: str, timer: Timer, ctx: Context) -> None:
        """End a timed-out session, or apply the waiting events the watermark has passed.

        Example:
            >>> sessions.on_timer("s1", timer, ctx)  # doctest: +SKIP
        """
        if timer.tag == TIMEOUT_TIMER:
            self._end(key, "timeout", timer.time_ms, ctx)
            return
        # All the passed events at once, not one timer per event time: after a catch-up
        # micro-batch the watermark may pass more event times than a key may fire timers in
        # one micro-batch (10,000). The sort is stable: events of equal time keep their order.
        waiting = sorted(self.waiting_events.get(), key=lambda event: event["time"])
        passed = [event for event in waiting if event["time"] <= ctx.watermark_ms]
        later = waiting[len(passed) :]
        for event in passed:
            timeout = ctx.timer(TIMEOUT_TIMER)
            if timeout is not None and timeout.time_ms < event["time"]:
                self._end(key, "timeout", timeout.time_ms, ctx)
            self._apply(key, event["event"], event["time"], ctx)
        self.waiting_events.set(later)
        if later:
            ctx.set_timer(APPLY_TIMER, event_time_ms=later[0]["time"])

    def _apply(self, key: str, event: str | None, time_ms: int, ctx: Context) -> None:
        """Apply one event, at its time, to the session."""
        if not self.started_ms.exists():
            if event != "join":
                return
            self.started_ms.set(time_ms)
            ctx.produce(
                self.changes_stream,
                {"session": key, "change": "started", "time": time_ms},
                key=key,
                time_ms=time_ms,
            )
            ctx.produce(
                self.deltas_stream,
                {"session": key, "delta": 1, "time": time_ms},
                key=key,
                time_ms=time_ms,
            )
        if event == "exit":
            self._end(key, "exit", time_ms, ctx)
            return
        ctx.set_timer(TIMEOUT_TIMER, event_time_ms=time_ms + self.timeout_seconds * 1000)

    def _end(self, key: str, reason: str, time_ms: int, ctx: Context) -> None:
        """End the started session at `time_ms`, for `reason`."""
        ctx.produce(
            self.changes_stream,
            {
                "session": key,
                "change": "ended",
                "reason": reason,
                "time": time_ms,
                "duration_ms": time_ms - self.started_ms.get(),
            },
            key=key,
            time_ms=time_ms,
        )
        ctx.produce(
            self.deltas_stream,
            {"session": key, "delta": -1, "time": time_ms},
            key=key,
            time_ms=time_ms,
        )
        self.started_ms.clear()
        ctx.delete_timer(TIMEOUT_TIMER)
