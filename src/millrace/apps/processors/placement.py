"""Where a processor's keys run on Spark: how many buckets, and each bucket's group value.

A processor's keys are spread over hash buckets, and Spark's `transformWithState` runs one
group per bucket (`millrace.apps.processors.streaming`). Spark sends a group to the task of
`pmod(murmur3(value), tasks)` of its grouping value. With the bucket's number as the value, 8
buckets fall 3 and 5 on 2 tasks, and 0, 1, 3 and 4 on 4: one task runs most of the records
while another waits. So a spread placement gives bucket `b` a group value whose hash leaves
the remainder `b mod 64` (`SPREAD_TASKS`). Its task is then `b mod tasks` for any power of
two of tasks up to 64, and the buckets share the tasks evenly when their count is a multiple
of the tasks'.

A bucket's state is kept under its group's value, so an app keeps the placement its
checkpoint was started with: apps started before the spread group each bucket by its number.
The app's fingerprint records which (`millrace.apps.state_schema`).
"""

from __future__ import annotations

import functools
from collections import defaultdict, deque
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.processor.processor import Processor

DEFAULT_BUCKETS = 8
"""Hash buckets a new processor's keys are spread over; each is one group of Spark's operator.

Each group of a micro-batch costs its Python worker a few milliseconds whatever its records
(a state round trip, its frames); 8 spread groups keep up to 8 tasks evenly busy.
"""

SPREAD_TASKS = 64
"""A spread placement shares the buckets evenly over any power of two of tasks up to this."""

_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class Placement:
    """A processor's bucket count, and whether its buckets' group values are spread.

    Example:
        >>> placement = Placement(8)
        >>> [_spark_hash(placement.group_of(bucket)) % 4 for bucket in range(8)]
        [0, 1, 2, 3, 0, 1, 2, 3]
        >>> placement.bucket_of(placement.group_of(5))
        5
        >>> Placement(8, spread=False).group_of(5)
        5
    """

    buckets: int
    spread: bool = True

    def group_of(self, bucket: int) -> int:
        """The grouping value of `bucket` in Spark's operator."""
        return _spread_groups(self.buckets)[bucket] if self.spread else bucket

    def bucket_of(self, group: int) -> int:
        """The bucket whose grouping value is `group`."""
        return _spread_buckets(self.buckets)[group] if self.spread else group

    def group_column(self, bucket: Column) -> Column:
        """The grouping value of each row's `bucket` (an int column)."""
        if not self.spread:
            return bucket
        groups = F.array(*(F.lit(group) for group in _spread_groups(self.buckets)))
        return F.element_at(groups, bucket + 1)


def bucket_count(processor_class: type[Processor], buckets: int | None = None) -> int:
    """`buckets` when given, else the processor's own `buckets`, else `DEFAULT_BUCKETS`.

    Example:
        >>> from millrace.processor import Input
        >>> class Wide(Processor):
        ...     name = "wide"
        ...     inputs = [Input("clicks", key="user")]
        ...     buckets = 64
        ...     def on_record(self, key, record, ctx): pass
        >>> bucket_count(Wide), bucket_count(Wide, 16)
        (64, 16)
    """
    if buckets is not None:
        return buckets
    return processor_class.buckets or DEFAULT_BUCKETS


@functools.cache
def _spread_groups(buckets: int) -> tuple[int, ...]:
    # The least unused values, in order, whose hash has each bucket's remainder.
    found: defaultdict[int, deque[int]] = defaultdict(deque)
    groups = []
    candidate = 0
    for bucket in range(buckets):
        wanted = bucket % SPREAD_TASKS
        while not found[wanted]:
            found[_spark_hash(candidate) % SPREAD_TASKS].append(candidate)
            candidate += 1
        groups.append(found[wanted].popleft())
    return tuple(groups)


@functools.cache
def _spread_buckets(buckets: int) -> dict[int, int]:
    return {group: bucket for bucket, group in enumerate(_spread_groups(buckets))}


def _spark_hash(value: int) -> int:
    """Spark's `hash()` of an int (Murmur3 x86 32-bit, seed 42), as its partitioner takes it."""
    k1 = _rotate_left((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = (_rotate_left(42 ^ k1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def _rotate_left(value: int, bits: int) -> int:
    return (value << bits | value >> (32 - bits)) & _MASK
