"""A bucket's stored keys: a key waits for the watermark for its timers and for the expiry of
the record ids it remembers, so an idle key still forgets them."""

from millrace.runtime.bucket_store import BucketStore

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
