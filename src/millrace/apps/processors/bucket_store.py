"""A bucket's stored state, kept as one JSON text per key so a micro-batch decodes only its keys.

The Spark runtime keeps every key of a hash bucket in one state value (see
`millrace.apps.processors.streaming`). Decoding and encoding all of a bucket's keys at each
micro-batch made the cost of a micro-batch grow with the keys stored, not with the keys it
touched. `BucketStore` keeps the bucket as two texts that split and join in C:

- `keys`: one line per key, the key as canonical JSON, a tab, the key's stored state as JSON;
- `timers`: one line per key that waits for the watermark or the clock, the key's JSON, a
  tab, and the watermark it waits for (empty when none): its earliest event-time timer, or the
  expiry of the record ids it remembers for deduplication (one past the earliest id's event
  time), whichever is first; then, for a key with processing-time timers, a tab and the
  earliest of them. A line without that third field has none, as every line stored before
  processing-time timers ran on Spark.

JSON text never holds a raw tab or newline (it escapes them), so the lines split safely.
A micro-batch decodes the state of the keys that have records and of the keys whose wait the
watermark or the clock has passed (found from `timers` without decoding any state), and
encodes only the keys that ran; every other key's text is copied through as it is.

Keys Python finds equal (1, 1.0, True) are one key, as in `processor_rows.bucket_of`; a key
read back from the store is in its canonical form (1, and a tuple for a list).

Example:
    >>> store = BucketStore(None, None)
    >>> store.update({"cats": {"timers": {"close": ["event_time", 2000]}}}, processor="p")
    >>> store.due_keys(2000), store.next_timer_ms()
    (['cats'], 2000)
    >>> store.update({"dogs": {"timers": {"idle": ["processing_time", 9000]}}}, processor="p")
    >>> store.due_keys(None, processing_time_ms=9000), store.next_clock_ms()
    (['dogs'], 9000)
    >>> BucketStore(*store.encode()).get("cats")
    {'timers': {'close': ['event_time', 2000]}}
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TypeVar, overload

from millrace.errors import ProcessorError
from millrace.processor.keys import Key
from millrace.records import JsonMapping

_encode_str = json.encoder.encode_basestring_ascii
_Default = TypeVar("_Default")


class BucketStore(Mapping[Key, JsonMapping]):
    """One bucket's keys and their stored state, decoded key by key on first use.

    Example:
        >>> BucketStore(*BucketStore(None, None).encode()).get("cats") is None
        True
    """

    def __init__(self, keys: str | None, timers: str | None) -> None:
        self._texts: dict[str, str] = _lines(keys)
        self._timers: dict[str, int] = {}
        self._clock: dict[str, int] = {}
        for key_text, times in _lines(timers).items():
            event_ms, _, clock_ms = times.partition("\t")
            if event_ms:
                self._timers[key_text] = int(event_ms)
            if clock_ms:
                self._clock[key_text] = int(clock_ms)
        self._decoded: dict[str, JsonMapping] = {}
        self._key_texts: dict[Key, str] = {}

    @overload
    def get(self, key: Key) -> JsonMapping | None: ...
    @overload
    def get(self, key: Key, default: JsonMapping | _Default) -> JsonMapping | _Default: ...
    def get(self, key: Key, default: object = None) -> object:
        """The stored state of `key`, decoded, or `default` when the key has none."""
        key_text = self._key_texts.get(key)
        if key_text is None:
            key_text = self._key_texts[key] = canonical_text(key)
        decoded = self._decoded.get(key_text)
        if decoded is None:
            text = self._texts.get(key_text)
            if text is None:
                return default
            decoded = self._decoded[key_text] = json.loads(text)
        return decoded

    def __getitem__(self, key: Key) -> JsonMapping:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[Key]:
        return (key_of_text(key_text) for key_text in self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def due_keys(
        self, watermark_ms: int | None, *, processing_time_ms: int | None = None
    ) -> list[Key]:
        """The keys with a due timer: of event time (or an id expiry) by `watermark_ms`.

        With `processing_time_ms`, also the keys with a processing-time timer at or before it.
        """
        due = dict.fromkeys(
            key_text
            for key_text, time_ms in self._timers.items()
            if watermark_ms is not None and time_ms <= watermark_ms
        )
        if processing_time_ms is not None:
            due.update(
                (key_text, None)
                for key_text, time_ms in self._clock.items()
                if time_ms <= processing_time_ms
            )
        return [key_of_text(key_text) for key_text in due]

    def next_timer_ms(self) -> int | None:
        """The earliest event-time timer (or id expiry) of any key, or None."""
        return min(self._timers.values(), default=None)

    def next_clock_ms(self) -> int | None:
        """The earliest processing-time timer of any key, or None."""
        return min(self._clock.values(), default=None)

    def update(self, states: Mapping[Key, JsonMapping | None], *, processor: str) -> None:
        """Replace the stored state of each key in `states`; None removes the key."""
        for key, key_stored in states.items():
            # A key that JSON cannot hold was looked up by its repr, but is not stored.
            key_text = (self._key_texts.get(key) if type(key) is str else None) or _text_of(
                key, processor
            )
            self._decoded.pop(key_text, None)
            if key_stored is None:
                self._texts.pop(key_text, None)
                self._timers.pop(key_text, None)
                self._clock.pop(key_text, None)
                continue
            self._texts[key_text] = _text_of(key_stored, processor)
            times: list[int] = []
            clock_times: list[int] = []
            for domain, time_ms in key_stored.get("timers", {}).values():
                (times if domain == "event_time" else clock_times).append(time_ms)
            seen = key_stored.get("seen")
            if seen:
                # An id is forgotten once the watermark is past its event time.
                times.append(min(seen.values()) + 1)
            _set_or_drop(self._timers, key_text, min(times, default=None))
            _set_or_drop(self._clock, key_text, min(clock_times, default=None))

    def encode(self) -> tuple[str, str]:
        """The `keys` and `timers` texts, to store; `BucketStore(*encode())` reads them back."""
        waits = [
            f"{key_text}\t{self._timers.get(key_text, '')}"
            + (f"\t{self._clock[key_text]}" if key_text in self._clock else "")
            for key_text in {**self._timers, **self._clock}
        ]
        return "\n".join(map("\t".join, self._texts.items())), "\n".join(waits)


def canonical_key(key: object) -> object:
    """`key` as JSON-able data in which keys Python finds equal (1, 1.0, True) are the same.

    Example:
        >>> canonical_key((True, 2.0, "a"))
        [1, 2, 'a']
    """
    if isinstance(key, bool):
        return int(key)
    if isinstance(key, float) and key.is_integer():
        return int(key)
    if isinstance(key, tuple):
        return [canonical_key(part) for part in key]
    return key


def canonical_text(key: object) -> str:
    """The canonical JSON text of `key`; keys that JSON cannot hold get their repr.

    Example:
        >>> canonical_text(("cats", 1.0))
        '["cats", 1]'
    """
    # Called for every key a micro-batch runs: a str key (the usual one) is encoded by the C
    # function that json.dumps ends in, and other keys by json.dumps's shared encoder, which
    # it only uses when given no options.
    if type(key) is str:
        return _encode_str(key)
    try:
        return json.dumps(canonical_key(key))
    except (TypeError, ValueError):
        return json.dumps(canonical_key(key), default=repr)


def key_of_text(text: str) -> Key:
    """The key of its canonical JSON text: a list is read back as a tuple.

    Example:
        >>> key_of_text('["cats",1]')
        ('cats', 1)
    """
    return _key_from_json(json.loads(text))


def _key_from_json(key: object) -> object:
    # A key is hashable, so a list in stored JSON was a tuple.
    return tuple(_key_from_json(part) for part in key) if isinstance(key, list) else key


def _set_or_drop(index: dict[str, int], key_text: str, time_ms: int | None) -> None:
    if time_ms is None:
        index.pop(key_text, None)
    else:
        index[key_text] = time_ms


def _lines(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    return dict(line.split("\t", 1) for line in text.split("\n"))


def _text_of(data: object, processor: str) -> str:
    """`data` (a key or a key's stored state) as JSON; a `ProcessorError` when JSON cannot."""
    try:
        return _encode_str(data) if type(data) is str else json.dumps(canonical_key(data))
    except (TypeError, ValueError) as error:
        raise ProcessorError(
            f"processor {processor!r} has a key or state that JSON cannot hold: {error}",
            hint="make Input keys str, int, float, bool or tuples of them",
        ) from None
