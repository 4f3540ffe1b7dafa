"""A bucket's stored keys: a key waits for the watermark for its timers and for the expiry of
the record ids it remembers, so an idle key still forgets them."""

from millrace.apps.processors.bucket_store import BucketStore

T0 = 1_767_225_600_000


def test_a_key_that_remembers_ids_is_due_once_the_watermark_passes_the_earliest() -> None:
    store = BucketStore(None, None)
    store.update(
        {
            "remembers": {"seen": {"r1": T0 + 5_000, "r2": T0 + 9_000}},
            "waits": {"timers": {"close": ["event_time", T0 + 7_000]}},
        },
        processor="counter",
    )

    # An id is remembered while its event time is at or after the watermark.
    assert store.due_keys(T0 + 5_000) == []
    assert store.due_keys(T0 + 5_001) == ["remembers"]
    assert store.next_timer_ms() == T0 + 5_001
    reread = BucketStore(*store.encode())
    assert sorted(reread.due_keys(T0 + 7_000)) == ["remembers", "waits"]


def test_a_timer_earlier_than_the_ids_expiry_is_what_the_key_waits_for() -> None:
    store = BucketStore(None, None)
    store.update(
        {"both": {"seen": {"r1": T0 + 5_000}, "timers": {"t": ["event_time", T0 + 1_000]}}},
        processor="counter",
    )

    assert store.next_timer_ms() == T0 + 1_000
    store.update({"both": None}, processor="counter")
    assert store.next_timer_ms() is None
    assert store.due_keys(T0 + 10_000) == []


def test_a_key_with_a_processing_time_timer_is_due_once_the_clock_reaches_it() -> None:
    store = BucketStore(None, None)
    store.update(
        {
            "idle": {"timers": {"idle": ["processing_time", T0 + 30_000]}},
            "both": {
                "timers": {"close": ["event_time", T0], "idle": ["processing_time", T0 + 5_000]}
            },
        },
        processor="sessions",
    )

    assert store.next_clock_ms() == T0 + 5_000
    assert store.next_timer_ms() == T0
    reread = BucketStore(*store.encode())
    assert reread.due_keys(None, processing_time_ms=T0 + 4_999) == []
    assert reread.due_keys(None, processing_time_ms=T0 + 5_000) == ["both"]
    assert sorted(reread.due_keys(None, processing_time_ms=T0 + 30_000)) == ["both", "idle"]
    # The watermark alone wakes only event-time timers.
    assert reread.due_keys(T0 + 60_000) == ["both"]
    reread.update({"idle": None, "both": {"state": {"n": 1}}}, processor="sessions")
    assert reread.next_clock_ms() is None
    assert reread.next_timer_ms() is None


def test_a_bucket_stored_before_processing_time_timers_reads_as_having_none() -> None:
    store = BucketStore('"cats"\t{"timers":{"close":["event_time",2000]}}', '"cats"\t2000')

    assert store.due_keys(2000, processing_time_ms=10**15) == ["cats"]
    assert store.next_clock_ms() is None
    assert store.encode()[1] == '"cats"\t2000'
