"""Output semantics across the bus: dropping duplicate records, and writing a batch at most once.

Spark's Kafka sink is at-least-once: a micro-batch that is run again after a crash writes its
records again. Every record a millrace app produces carries a deterministic id (the same on
the re-run), and every millrace reader drops the ids it has seen, within its input's
watermark horizon: `drop_duplicate_records` does that with Spark's
`dropDuplicatesWithinWatermark`. Together that is exactly-once, MillWheel's record identity
plus deduplication (MillWheel, section 5.2).

The horizon: Spark keeps an id until the input's low watermark passes the record's event
time plus the lateness, and drops a record whose event time is already behind the watermark when it
comes, duplicate or not, counting it as a late row. A copy of a record is therefore caught,
as a duplicate or as a late row, as long as it comes after the original: that is the
horizon (see `docs/semantics.md`).

`AtMostOnce` gives the other end: a batch id is recorded before the batch is written, and a
batch whose id is recorded is not written again on a re-run, so a crash can lose the part of
a batch not yet written, but never writes a record twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal, cast, get_args

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.config.storage import StoragePath, listing
from millrace.errors import EngineError

Semantics = Literal["exactly_once", "at_least_once", "at_most_once"]
"""The three output semantics of an app; "exactly_once" is the default."""

SEMANTICS: tuple[str, ...] = get_args(Semantics)

# millrace's Spark extension plans a query's filter below the deduplication by this column
# (`RecordDedup`): the copies of a record carry its value, so the filter may go first.
_DEDUP_KEY = "_millrace_dedup_key"
# Batch markers kept by `AtMostOnce`: a re-run is only ever of the last batch or two.
_MARKERS_KEPT = 20


def require_semantics(value: str, where: str) -> Semantics:
    """`value` as one of the three semantics; `EngineError` saying `where` when it is not.

    Example:
        >>> require_semantics("at_least_once", "app demo")
        'at_least_once'
    """
    if value not in SEMANTICS:
        raise EngineError(
            f"{where}: semantics {value!r} is not known",
            hint=f"use one of {', '.join(repr(name) for name in SEMANTICS)}",
        )
    return cast(Semantics, value)


def drop_duplicate_records(records: DataFrame, *, key: str = "record_id") -> DataFrame:
    """`records` without the rows whose `key` an earlier row had, within the watermark horizon.

    `records` must have a watermark already (`millrace.engine.low_watermark`); it is kept, so
    windows downstream see the watermark they would see without this step. An id is kept
    until the watermark passes its record's event time plus the lateness. A row whose event
    time is behind the watermark when it comes is dropped as late, duplicate or not, and
    counted in the query's late rows (Spark's `dropDuplicatesWithinWatermark`). `key` names a
    column that is never null.
    """
    # The id is copied to a column of its own, the state's key, whatever `key` is called.
    return (
        records.withColumn(_DEDUP_KEY, F.col(key))
        .dropDuplicatesWithinWatermark([_DEDUP_KEY])
        .drop(_DEDUP_KEY)
    )


def run_without_writing(batch: DataFrame) -> None:
    """Run micro-batch `batch` to its end and write none of its rows.

    For a micro-batch run again whose output was written before it stopped: its state must
    still be committed. Stateful operators commit their state only when the batch's plan
    runs, and Spark refuses to go on from a micro-batch that committed none
    (`STATE_STORE_COMMIT_VALIDATION_FAILED`), so an app killed after writing a batch and before
    Spark recorded it done could not start again.
    """
    batch.write.format("noop").mode("overwrite").save()


class AtMostOnce:
    """Writes each micro-batch at most once: the batch id is recorded first, then the batch.

    On a re-run of a batch whose id is recorded (the app stopped while writing it, or after
    writing it but before Spark recorded it done) the write is skipped: what that batch had
    not yet written is lost, nothing is written twice. The marks live in `folder`, under the
    query's checkpoint. A skipped batch must still run (`run_without_writing`).

    Example:
        >>> once, written = AtMostOnce(tmp_path / "at_most_once"), []
        >>> once.write(7, lambda: written.append(7)), once.write(7, lambda: written.append(7))
        (True, False)
        >>> written, once.skipped
        ([7], [7])
    """

    def __init__(self, folder: StoragePath) -> None:
        self.folder = folder
        self.skipped: list[int] = []

    def write(self, batch_id: int, write: Callable[[], None]) -> bool:
        """Run `write` unless batch `batch_id` was started before; True when it ran."""
        mark = self.folder / f"{batch_id:020d}"
        if mark.exists():
            self.skipped.append(batch_id)
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        # The mark must be stored before the first record is: a crash in between loses the
        # batch (allowed), while the other order could write it twice (not allowed).
        if isinstance(mark, Path):
            _write_synced(mark)
        else:
            mark.write_text("")  # an object store has the object once the write returns
        write()
        for old in listing(self.folder)[:-_MARKERS_KEPT]:
            old.unlink(missing_ok=True)
        return True


def _write_synced(mark: Path) -> None:
    """Create the empty file `mark`, it and its folder's entry flushed to the disk."""
    with open(mark, "w") as handle:
        handle.flush()
        os.fsync(handle.fileno())
    directory = os.open(mark.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
