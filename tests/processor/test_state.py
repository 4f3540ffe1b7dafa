"""Per-key state: value, list and map state, their types, TTL and stored form."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

import json
from typing import Any

import pytest

from millrace import Input, ListState, MapState, Processor, ValueState
from millrace.errors import ProcessorError
from millrace.testing import ProcessorTester

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY = 86_400_000


class Profile(Processor):
    name = "profile"
    inputs = [Input("clicks", key="user", time="ts")]
    last_page = ValueState(str)
    pages = ListState(str)
    visits = MapState(key=str, value=int)

    def on_record(self, key, record, ctx):
        self.last_page.set(record["page"])
        self.pages.append(record["page"])
        self.visits[record["page"]] = self.visits.get(record["page"], 0) + 1


def clicks(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"user": user, "page": page, "ts": T0} for user, page in pairs]


def test_each_key_sees_only_its_own_value_list_and_map() -> None:
    tester = ProcessorTester(Profile)
    tester.feed("clicks", clicks(("ann", "/"), ("bob", "/a"), ("ann", "/b"), ("ann", "/")))
    tester.run_batch()

    assert tester.state("ann") == {
        "last_page": "/",
        "pages": ["/", "/b", "/"],
        "visits": {"/": 2, "/b": 1},
    }
    assert tester.state("bob") == {"last_page": "/a", "pages": ["/a"], "visits": {"/a": 1}}
    assert tester.state("cyd") == {"last_page": None, "pages": [], "visits": {}}


def test_state_persists_across_micro_batches() -> None:
    tester = ProcessorTester(Profile)
    tester.feed("clicks", clicks(("ann", "/")))
    tester.run_batch()
    tester.feed("clicks", clicks(("ann", "/b")))
    tester.run_batch()

    assert tester.state("ann")["pages"] == ["/", "/b"]


def test_stored_state_is_plain_json_and_map_keys_keep_their_type() -> None:
    class Buckets(Processor):
        name = "buckets"
        inputs = [Input("events", key="k", time="ts")]
        counts = MapState(key=int, value=int)

        def on_record(self, key, record, ctx):
            self.counts[ctx.event_time_ms] = self.counts.get(ctx.event_time_ms, 0) + 1

    tester = ProcessorTester(Buckets)
    tester.feed("events", [{"k": "a", "ts": T0}, {"k": "a", "ts": T0}])
    outcome = tester.run_batch()

    stored = outcome.states["a"]
    assert json.loads(json.dumps(stored)) == stored
    assert tester.state("a") == {"counts": {T0: 2}}


class Typed(Processor):
    name = "typed"
    inputs = [Input("events", key="k", time="ts")]
    total = ValueState(int)
    tags = ListState(str)
    scores = MapState(key=str, value=float)
    history = ValueState(list[int] | None)

    def on_record(self, key, record, ctx):
        if record["state"] == "total":
            self.total.set(record["value"])
        elif record["state"] == "tags":
            self.tags.append(record["value"])
        elif record["state"] == "scores":
            self.scores[record["map_key"]] = record["value"]
        else:
            self.history.set(record["value"])


@pytest.mark.parametrize(
    ("write", "message"),
    [
        ({"state": "total", "value": "3"}, "state Typed.total holds values of type int, got '3'"),
        ({"state": "total", "value": True}, "holds values of type int, got True"),
        ({"state": "tags", "value": 4}, "state Typed.tags holds values of type str, got 4"),
        ({"state": "scores", "map_key": 1, "value": 1.5}, "Typed.scores holds keys of type str"),
        ({"state": "scores", "map_key": "a", "value": "x"}, "holds values of type float"),
        ({"state": "history", "value": [1, "2"]}, "holds values of type list[int] | None"),
    ],
)
def test_writing_a_value_of_another_type_fails_naming_the_state(
    write: dict[str, Any], message: str
) -> None:
    tester = ProcessorTester(Typed)
    tester.feed("events", [{"k": "a", "ts": T0, **write}])

    with pytest.raises(ProcessorError) as raised:
        tester.run_batch()

    assert message in raised.value.message
    assert "failed on key 'a'" in raised.value.message


def test_values_of_the_declared_types_are_accepted() -> None:
    tester = ProcessorTester(Typed)
    tester.feed(
        "events",
        [
            {"k": "a", "ts": T0, "state": "total", "value": 3},
            {"k": "a", "ts": T0, "state": "tags", "value": "x"},
            {"k": "a", "ts": T0, "state": "scores", "map_key": "s", "value": 2},
            {"k": "a", "ts": T0, "state": "history", "value": [1, 2]},
        ],
    )
    tester.run_batch()

    assert tester.state("a") == {"total": 3, "tags": ["x"], "scores": {"s": 2}, "history": [1, 2]}


def test_state_is_written_through_its_handle_not_assigned() -> None:
    class Assigning(Processor):
        name = "assigning"
        inputs = [Input("events", key="k", time="ts")]
        total = ValueState(int)

        def on_record(self, key, record, ctx):
            self.total = 3

    tester = ProcessorTester(Assigning)
    tester.feed("events", [{"k": "a", "ts": T0}])

    with pytest.raises(ProcessorError, match=r"state Assigning.total cannot be assigned"):
        tester.run_batch()


def test_state_is_not_readable_outside_a_callback() -> None:
    with pytest.raises(ProcessorError, match="read outside a callback"):
        Profile().last_page.get()


class Remembering(Processor):
    name = "remembering"
    inputs = [Input("events", key="k", time="ts")]
    seen = ValueState(str, ttl="7d")
    recent = ListState(str, ttl="1d")
    per_page = MapState(key=str, value=int, ttl="1d")

    def on_record(self, key, record, ctx):
        self.seen.set(record["page"])
        self.recent.append(record["page"])
        self.per_page[record["page"]] = self.per_page.get(record["page"], 0) + 1


def test_ttl_counts_processing_time_since_the_value_was_last_written() -> None:
    tester = ProcessorTester(Remembering, clock_ms=0)
    tester.feed("events", [{"k": "a", "ts": T0, "page": "/"}])
    tester.run_batch()

    tester.advance_clock(6 * DAY)
    tester.feed("events", [{"k": "a", "ts": T0, "page": "/b"}])
    tester.run_batch()
    assert tester.state("a") == {"seen": "/b", "recent": ["/b"], "per_page": {"/b": 1}}

    tester.advance_clock(6 * DAY + DAY - 1)
    assert tester.state("a")["recent"] == ["/b"]
    tester.advance_clock(7 * DAY)
    assert tester.state("a") == {"seen": "/b", "recent": [], "per_page": {}}
    tester.advance_clock(13 * DAY)
    assert tester.state("a")["seen"] is None


def test_expired_map_entries_start_again_from_nothing() -> None:
    tester = ProcessorTester(Remembering)
    tester.feed("events", [{"k": "a", "ts": T0, "page": "/"}])
    tester.run_batch()
    tester.advance_clock(DAY)
    tester.feed("events", [{"k": "a", "ts": T0, "page": "/"}])
    outcome = tester.run_batch()

    assert tester.state("a")["per_page"] == {"/": 1}
    assert outcome.states["a"]["state"]["recent"] == [["/", DAY]]


def test_a_key_whose_values_all_expired_is_removed_from_the_store() -> None:
    class Idle(Processor):
        name = "idle"
        inputs = [Input("events", key="k", time="ts")]
        seen = ValueState(int, ttl="1s")

        def on_record(self, key, record, ctx):
            if record.get("write"):
                self.seen.set(1)

    tester = ProcessorTester(Idle)
    tester.feed("events", [{"k": "a", "ts": T0, "write": True}])
    tester.run_batch()
    tester.advance_clock(1000)
    tester.feed("events", [{"k": "a", "ts": T0}])

    assert tester.run_batch().states == {"a": None}


def test_set_state_writes_typed_values_for_a_test_to_start_from() -> None:
    tester = ProcessorTester(Profile)
    tester.set_state("ann", visits={"/": 5}, pages=["/"])
    tester.feed("clicks", clicks(("ann", "/")))
    tester.run_batch()

    assert tester.state("ann") == {"last_page": "/", "pages": ["/", "/"], "visits": {"/": 6}}
    with pytest.raises(ProcessorError, match="holds values of type int"):
        tester.set_state("ann", visits={"/": "five"})
    with pytest.raises(ProcessorError, match="declares no state 'visit'"):
        tester.set_state("ann", visit={})
