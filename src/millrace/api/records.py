"""A stream's newest records, decoded, and its dead letters with their reasons.

`GET /streams/{name}/records?count=20` gives the newest records over all buckets, newest
first; `GET /streams/{name}/dead-letters?count=20` those of its dead-letter stream
(`<name>.dlq`), each with the reason it was set aside and where it came from. Watermark
markers are not records and are left out. Each bucket is read from `count` records before its
end, so a look costs the same however long the stream.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel

from millrace.api.deps import get_workspace
from millrace.api.errors import ERROR_RESPONSES
from millrace.api.monitoring import INTERNAL_PREFIX, STREAM_NAME_PATTERN, iso_time
from millrace.bus.internal import StampedRecord, read_after
from millrace.bus.streams import dead_letter_stream, describe_stream, validate_stream_name
from millrace.config.workspace import Workspace
from millrace.errors import StreamNotFoundError
from millrace.records import JsonObject

router = APIRouter(responses=ERROR_RESPONSES)


class StreamRecord(BaseModel):
    """One record: where it is, its key and id, its event time and arrival, its value."""

    bucket: int
    offset: int
    key: str | None
    id: str | None
    time: str | None
    arrived: str | None
    value: JsonObject


class DeadLetter(BaseModel):
    """A record no reader could decode: why, where it came from, and its bytes as text."""

    bucket: int
    offset: int
    arrived: str | None
    reason: str
    source_stream: str | None
    source_bucket: int | None
    source_offset: int | None
    original: str


@router.get("/streams/{name}/records", summary="A stream's newest records, decoded")
def records(
    name: str = Path(description="The stream's name.", pattern=STREAM_NAME_PATTERN),
    count: int = Query(20, ge=1, le=500, description="How many of the newest records."),
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
) -> list[StreamRecord]:
    """The newest `count` records over all buckets, newest first; 404 for no such stream."""
    validate_stream_name(name.removeprefix(INTERNAL_PREFIX))
    return [
        StreamRecord(
            bucket=found.record.bucket,
            offset=found.record.offset,
            key=found.record.key,
            id=found.record.id,
            time=iso_time(found.record.time_ms),
            arrived=iso_time(found.append_ms),
            value=found.record.value,
        )
        for found in newest_records(workspace, name, count)
    ]


@router.get(
    "/streams/{name}/dead-letters",
    summary="The newest records of a stream that went to its dead-letter stream, with why",
)
def dead_letters(
    name: str = Path(description="The stream's name.", pattern=STREAM_NAME_PATTERN),
    count: int = Query(20, ge=1, le=500, description="How many of the newest dead letters."),
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
) -> list[DeadLetter]:
    """Newest first; none when no record of the stream was set aside yet, 404 for no stream."""
    validate_stream_name(name.removeprefix(INTERNAL_PREFIX))
    describe_stream(workspace.settings, name)
    try:
        found = newest_records(workspace, dead_letter_stream(name), count)
    except StreamNotFoundError:
        # The dead-letter stream is created by the first reader that sets a record aside.
        return []
    return [
        DeadLetter(
            bucket=letter.record.bucket,
            offset=letter.record.offset,
            arrived=iso_time(letter.append_ms),
            reason=str(letter.record.value.get("error", "")),
            source_stream=_text(letter.record.value.get("stream")),
            source_bucket=_number(letter.record.value.get("bucket")),
            source_offset=_number(letter.record.value.get("offset")),
            original=str(letter.record.value.get("original", "")),
        )
        for letter in found
    ]


def newest_records(workspace: Workspace, stream: str, count: int) -> list[StampedRecord]:
    """The newest `count` records of `stream` over its buckets, newest first.

    Raises `StreamNotFoundError` when the stream does not exist.
    """
    buckets = describe_stream(workspace.settings, stream).buckets
    starts = {
        bucket.bucket: max(bucket.start_offset, bucket.end_offset - count) for bucket in buckets
    }
    found, _ = read_after(workspace.settings, stream, starts, limit=count * len(starts))
    found.sort(key=lambda stamped: (stamped.append_ms or 0, stamped.record.offset), reverse=True)
    return found[:count]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
