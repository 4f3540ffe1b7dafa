"""Streams, the paper's Scribe categories: Kafka topics whose partitions are the buckets.

Create, list, describe and delete streams. Every record of a stream is one JSON object
holding its event time in a field; the Kafka timestamp is the time the record arrived, which
is what retention counts from.
`<stream>.dlq` is the stream's dead-letter stream, created on first use by whoever routes a
bad record there.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

# confluent-kafka's admin package imports these without `__all__` or `as`: strict mypy takes
# them as not exported.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
    TopicMetadata,
)

from millrace.bus.client_config import kafka_client_config
from millrace.bus.timeouts import bounded
from millrace.config.durations import parse_duration_ms
from millrace.config.settings import Settings
from millrace.errors import BusError, StreamExistsError, StreamNameError, StreamNotFoundError

DEAD_LETTER_SUFFIX = ".dlq"
MAX_BUCKETS = 1024
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_TIMEOUT_S = 15.0
_FOREVER = ("forever", "infinite", "-1")
_LOGIN_CHECK_S = 1.0
_NEW_STREAM_SPREAD_S = 2.0
"""How long a stream just created may stay unknown to some brokers of a bus of several."""
_REFUSED_LOGINS = (
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError.SASL_AUTHENTICATION_FAILED,
)
_NO_ANSWER_YET = (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
_LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        # A new leader whose high watermark has not caught up yet (CI, a node just lost).
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
_ASK_S = 5.0
"""How long one request for offsets waits: a lost node's requests are never answered."""


@dataclass(frozen=True)
class BucketInfo:
    """One bucket (Kafka partition) of a stream, with the offsets it holds."""

    bucket: int
    start_offset: int
    end_offset: int

    @property
    def record_count(self) -> int:
        """Records kept in the bucket: the end offset minus the first offset still retained."""
        return self.end_offset - self.start_offset


@dataclass(frozen=True)
class StreamInfo:
    """What `millrace stream describe` shows."""

    name: str
    buckets: tuple[BucketInfo, ...]
    retention_ms: int

    @property
    def record_count(self) -> int:
        """Records kept over all buckets."""
        return sum(bucket.record_count for bucket in self.buckets)


def dead_letter_stream(stream: str) -> str:
    """The name of the stream that holds the records of `stream` no reader could decode."""
    return stream + DEAD_LETTER_SUFFIX


def validate_stream_name(name: str) -> str:
    """Return `name` if it can name a stream; raise `StreamNameError` saying why not."""
    if not _NAME.match(name):
        raise StreamNameError(
            f"{name!r} is not a valid stream name",
            hint="use 1 to 200 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


def create_stream(
    settings: Settings,
    name: str,
    *,
    buckets: int = 1,
    retention: str = "7d",
    exist_ok: bool = False,
) -> None:
    """Create stream `name` with `buckets` partitions that keep records for `retention`.

    `retention` is a duration such as `3d` or `12h`, or `forever`. Raises `StreamExistsError`
    when the stream exists (unless `exist_ok`), `StreamNameError` for a bad name or setting.
    """
    validate_stream_name(name)
    if not 1 <= buckets <= MAX_BUCKETS:
        raise StreamNameError(
            f"stream {name!r}: {buckets} buckets is out of range",
            hint=f"choose between 1 and {MAX_BUCKETS} buckets",
        )
    retention_ms = _retention_ms(retention)
    admin = admin_client(settings)
    topic = stream_topic(settings, name, buckets, retention_ms)
    future = admin.create_topics([topic], request_timeout=bounded(_TIMEOUT_S))[name]
    try:
        future.result(timeout=bounded(_TIMEOUT_S))
        wait_for_leaders(admin, name)
    except KafkaException as error:
        if error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            if exist_ok:
                return
            raise StreamExistsError(
                f"stream {name!r} already exists",
                hint=f"use it as it is, or delete it first (`millrace stream delete {name}`)",
            ) from None
        raise bus_error(f"could not create stream {name!r}", error, settings) from None


def list_streams(settings: Settings) -> list[str]:
    """The names of all streams, sorted; Kafka's internal topics are left out."""
    metadata = _metadata(settings, None, "could not list the streams")
    return sorted(name for name in metadata.topics if not name.startswith("__"))


def describe_stream(settings: Settings, name: str) -> StreamInfo:
    """Buckets with their start and end offsets, record count and retention of stream `name`."""
    partitions = sorted(_topic(settings, name).partitions)
    admin = admin_client(settings)
    # confluent-kafka leaves OffsetSpec.earliest and .latest unannotated.
    starts = _offsets(admin, name, partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    ends = _offsets(admin, name, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    resource = ConfigResource(ResourceType.TOPIC, name)
    configs = admin.describe_configs([resource], request_timeout=bounded(_TIMEOUT_S))[resource]
    retention_ms = int(configs.result(timeout=bounded(_TIMEOUT_S))["retention.ms"].value)
    buckets = tuple(BucketInfo(p, starts[p], ends[p]) for p in partitions)
    return StreamInfo(name, buckets, retention_ms)


def appended_since(settings: Settings, name: str, since_ms: int) -> dict[int, int]:
    """The records that reached each bucket of stream `name` at or after `since_ms` (epoch ms).

    Kafka's timestamp is the arrival time, so the bus's time index finds each bucket's first
    such record, and nothing is read. `StreamNotFoundError` when there is no such stream.
    """
    partitions = sorted(_topic(settings, name).partitions)
    admin = admin_client(settings)
    # confluent-kafka leaves OffsetSpec.latest unannotated.
    ends = _offsets(admin, name, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    # -1 where no record has arrived since; a record arriving after the look at the ends is
    # left for the next look.
    firsts = _offsets(admin, name, partitions, OffsetSpec.for_timestamp(since_ms))
    return {p: max(0, ends[p] - firsts[p]) if firsts[p] >= 0 else 0 for p in partitions}


def delete_stream(settings: Settings, name: str) -> None:
    """Delete stream `name` and every record in it; `StreamNotFoundError` if there is none.

    Returns once the bus no longer lists the stream, so it can be created again at once.
    """
    admin = admin_client(settings)
    future = admin.delete_topics([name], request_timeout=bounded(_TIMEOUT_S))[name]
    try:
        future.result(timeout=bounded(_TIMEOUT_S))
        deadline = time.monotonic() + bounded(_TIMEOUT_S)
        while name in admin.list_topics(timeout=bounded(_TIMEOUT_S)).topics:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    except KafkaException as error:
        if error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise _not_found(name) from None
        raise bus_error(f"could not delete stream {name!r}", error, settings) from None


def require_stream(settings: Settings, name: str) -> int:
    """Return the bucket count of stream `name`; `StreamNotFoundError` when it does not exist."""
    return len(_topic(settings, name).partitions)


def format_retention(retention_ms: int) -> str:
    """`3d`, `12h`, `90m`... or `forever`: the shortest exact form of a retention."""
    if retention_ms < 0:
        return "forever"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if retention_ms % size == 0:
            return f"{retention_ms // size}{unit}"
    return f"{retention_ms}ms"


def _retention_ms(retention: str) -> int:
    if retention.strip().lower() in _FOREVER:
        return -1
    retention_ms = parse_duration_ms(retention, what="retention")
    if retention_ms <= 0:
        raise StreamNameError(
            f"retention {retention!r} must be longer than zero",
            hint="write a duration such as 3d, or 'forever'",
        )
    return retention_ms


def stream_topic(settings: Settings, name: str, buckets: int, retention_ms: int) -> NewTopic:
    """The Kafka topic of a new stream: its buckets, its retention, and its copies.

    Retention counts from arrival: Kafka's timestamp is the arrival time, not the event
    time, so replayed or backfilled events dated in the past are not deleted at once (the
    event time travels in the value's time field, where every millrace reader looks).
    Every bucket is kept on `replicas(...)` brokers (`kafka.replication`, or as many as the
    bus has, up to 3), and a write waits for 2 of 3 copies (`min.insync.replicas`), so that
    a broker lost loses no record that a writer was told was stored, and stops no writer.
    """
    # Any metadata answer lists the brokers: asking of this stream alone, not of them all.
    brokers = _metadata(settings, name, f"could not create stream {name!r}").brokers
    copies = replicas(settings.kafka_replication, len(brokers))
    return NewTopic(
        name,
        num_partitions=buckets,
        replication_factor=copies,
        config={
            "retention.ms": str(retention_ms),
            "message.timestamp.type": "LogAppendTime",
            "min.insync.replicas": str(max(1, min(2, copies - 1))),
        },
    )


def replicas(setting: int, brokers: int) -> int:
    """The copies of each bucket: `setting` (`kafka.replication`), or if 0 one per broker, up to 3.

    Example:
        >>> replicas(0, 1), replicas(0, 5), replicas(2, 5)
        (1, 3, 2)
    """
    return setting or max(1, min(3, brokers))


def wait_for_leaders(admin: AdminClient, name: str) -> None:
    """Block until every bucket of a new stream has a leader, so it is usable at once.

    Kafka answers a topic's creation before its partitions have leaders; a write or read in
    between fails. Gives up silently after the bus's timeout, leaving the error to the use.
    """
    deadline = time.monotonic() + bounded(_TIMEOUT_S)
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=bounded(_TIMEOUT_S)).topics.get(name)
        if (
            topic
            and topic.partitions
            and all(
                partition.leader >= 0 and partition.error is None
                for partition in topic.partitions.values()
            )
        ):
            return
        time.sleep(0.05)


def _offsets(
    admin: AdminClient, name: str, partitions: list[int], spec: OffsetSpec
) -> dict[int, int]:
    request = {TopicPartition(name, partition): spec for partition in partitions}
    deadline = time.monotonic() + 2 * bounded(_TIMEOUT_S)
    while True:
        refused: KafkaException | None = None
        ask_s = min(_ASK_S, bounded(_TIMEOUT_S))
        futures = admin.list_offsets(request, request_timeout=ask_s)
        try:
            offsets = {
                tp.partition: future.result(timeout=ask_s + 1).offset
                for tp, future in futures.items()
            }
            # Right after a node's loss, a bucket it led is answered with no offset and no
            # error (-1001): not an answer.
            if OFFSET_INVALID not in offsets.values():
                return offsets
        except KafkaException as error:
            # A bucket whose leader just moved or was just created answers with an error for
            # a moment, which librdkafka does not always mark retriable: a broker not yet told
            # it leads a bucket just created answered NOT_LEADER_FOR_PARTITION in CI.
            failure = error.args[0]
            code = failure.code()
            if not (failure.retriable() or code in _LEADER_MOVING or code in _NO_ANSWER_YET):
                raise
            refused = error
        except FutureTimeoutError:
            pass
        if time.monotonic() > deadline:
            if refused is not None:
                raise refused
            raise BusError(
                f"the bus did not answer for the offsets of stream {name!r} in "
                f"{2 * bounded(_TIMEOUT_S):.0f} s",
                hint="is the broker up? `millrace status` tells, `millrace up` starts it",
            )
        _refresh_leaders(admin, name, ask_s)
        time.sleep(0.1)


def _refresh_leaders(admin: AdminClient, name: str, wait_s: float) -> None:
    """Ask the bus who leads `name`'s buckets, so that the next request goes to them.

    A node lost keeps leading its buckets until the bus fences it (its session timeout, 9 s);
    the admin client, cached for the process, is told of the new leaders by this answer
    rather than at its own next refresh of the bus's metadata.
    """
    # If the bus does not answer this either, the next request tells what is wrong.
    with contextlib.suppress(KafkaException):
        admin.list_topics(topic=name, timeout=wait_s)


def admin_client(settings: Settings) -> AdminClient:
    """The Kafka admin client of the bus `settings` name, one per bus for the process."""
    return _admin_for(tuple(kafka_client_config(settings).items())).client


@dataclass
class _Admin:
    """An admin client and the refusals of its logins (TLS or SASL) that Kafka reported."""

    client: AdminClient
    refusals: list[KafkaError]


@functools.cache
def _admin_for(config: tuple[tuple[str, str], ...]) -> _Admin:
    # One client per cluster and login for the life of the process: a client that is
    # garbage-collected while a request is pending fails that request.
    refusals: list[KafkaError] = []

    def reported(error: KafkaError) -> None:
        if error.code() in _REFUSED_LOGINS:
            refusals.append(error)

    return _Admin(AdminClient({**dict(config), "log_level": 0}, error_cb=reported), refusals)


def _metadata(settings: Settings, topic: str | None, what: str) -> ClusterMetadata:
    """The bus's metadata (of `topic`, or of all streams), or the `BusError` saying `what` failed.

    librdkafka answers a refused login with a timeout; its error callback, served between
    short waits, tells the refusal within a second or two instead.
    """
    admin = _admin_for(tuple(kafka_client_config(settings).items()))
    deadline = time.monotonic() + bounded(_TIMEOUT_S)
    while True:
        try:
            wait_s = min(_LOGIN_CHECK_S, max(0.0, deadline - time.monotonic()))
            return admin.client.list_topics(topic=topic, timeout=wait_s)
        except KafkaException as error:
            admin.client.poll(0)
            if admin.refusals:
                raise bus_error(what, KafkaException(admin.refusals.pop()), settings) from None
            if time.monotonic() >= deadline or error.args[0].code() not in _NO_ANSWER_YET:
                raise bus_error(what, error, settings) from None


def _topic(settings: Settings, name: str) -> TopicMetadata:
    deadline = time.monotonic() + _NEW_STREAM_SPREAD_S
    while True:
        metadata = _metadata(settings, name, f"could not look up stream {name!r}")
        topic = metadata.topics.get(name)
        if topic is not None and topic.error is None:
            return topic
        # On a bus of several brokers, one that has not yet heard of a stream just created
        # elsewhere answers that it does not exist: ask again, maybe another, for a moment.
        if len(metadata.brokers) < 2 or time.monotonic() > deadline:
            raise _not_found(name)
        time.sleep(0.2)


def _not_found(name: str) -> StreamNotFoundError:
    return StreamNotFoundError(
        f"stream {name!r} does not exist",
        hint=f"create it with `millrace stream create {name}`, or list streams with "
        "`millrace stream list`",
    )


def bus_error(what: str, error: KafkaException, settings: Settings) -> BusError:
    """The `BusError` for a request to the bus that failed: `what` failed, why, and where.

    Example:
        >>> refused = KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
        >>> print(bus_error("could not list the streams", refused, Settings()))
        could not list the streams: Connection refused (bus at 127.0.0.1:9092)
    """
    where = settings.bootstrap_servers
    if settings.kafka_security_protocol != "PLAINTEXT":
        where += f", {settings.kafka_security_protocol}"
    if settings.kafka_uses_sasl:
        where += f", user {settings.kafka_user!r} ({settings.kafka_sasl_mechanism})"
    hint = "is the broker up? `millrace status` tells, `millrace up` starts it"
    if error.args[0].code() == KafkaError._SSL:
        hint = "check kafka.ssl_ca_file: it must hold the CA that signed the brokers' certificates"
    elif error.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR:
        hint = (
            "set kafka.replication to at most the bus's brokers, or to 0 for one copy per "
            "broker up to 3 (MILLRACE_KAFKA_REPLICATION)"
        )
    elif error.args[0].code() in _REFUSED_LOGINS:
        hint = (
            "check kafka.user and the password (MILLRACE_KAFKA_PASSWORD or "
            "kafka.password_file), and kafka.sasl_mechanism"
        )
    return BusError(f"{what}: {error.args[0].str()} (bus at {where})", hint=hint)
