"""Exactly-once across apps connected by streams, with their drivers killed by kill -9.

A stateless filter app writes a derived stream; a windowed aggregation app reads it into a
result table. Both are killed three times while they run and restarted each time (see
`crash_pipeline`). Spark's Kafka sink writes a re-run micro-batch again, so the middle
stream holds copies; with `exactly_once` (the default) the aggregation's reader drops them
by record id and the result equals the answer computed in plain Python. With
`at_least_once` the reader keeps them: the result counts each copy that was written. The
same holds when the aggregation is a processor, which drops the copies in its keys' state,
and a third app sums its productions.
"""

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from tests.runtime.crash_pipeline import Aggregator, CrashRun, known_answer, run_with_kills

EVENTS = 200_000
# Each kill costs a Spark start, most of a test's time. Every round kills the filter just after
# its micro-batch started writing (which makes the copies); three rounds kill the aggregation
# early, midway and late in the seconds after a commit (`crash_pipeline`).
KILLS = 3
# On a busy machine the run takes far longer than usual.
pytestmark = pytest.mark.timeout(3600)


def bounded_run(
    spark: SparkSession,
    workspace: Workspace,
    tmp_path: Path,
    semantics: str,
    seed: int,
    aggregator: Aggregator = Aggregator.SQL,
) -> CrashRun:
    """The CI-sized crash run: EVENTS events, each app killed KILLS times, then checked that
    every app was killed that often and that no kept event is missing from the middle stream.
    """
    run = run_with_kills(
        spark,
        workspace,
        tmp_path,
        run=uuid.uuid4().hex[:8],
        semantics=semantics,
        events=EVENTS,
        kills=KILLS,
        batch=5_000,
        seed=seed,
        aggregator=aggregator,
    )
    answer = known_answer(EVENTS)
    print(f"{semantics}, {aggregator.value}:", run.summary(answer))
    roles = ["filter", "agg", "total"] if aggregator is Aggregator.PROCESSOR else ["filter", "agg"]
    assert run.kills == dict.fromkeys(roles, KILLS)
    # The middle stream has every kept event, under one id each, and maybe copies.
    assert len(run.middle_ids) == sum(n for n, _ in answer.values())
    return run


def test_exactly_once_the_result_equals_the_answer_whatever_the_kills(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    run = bounded_run(spark, workspace, tmp_path, "exactly_once", seed=6)
    answer = known_answer(EVENTS)

    # No event lost, none counted twice: the copies were dropped by the aggregation's reader.
    assert run.results == answer


def test_exactly_once_a_processor_and_the_app_reading_it_count_each_event_once(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    run = bounded_run(
        spark, workspace, tmp_path, "exactly_once", seed=8, aggregator=Aggregator.PROCESSOR
    )
    answer = known_answer(EVENTS)

    # The processor dropped the middle stream's copies by id, and its own productions that a
    # re-run wrote again carry the ids of the first run, so the third app's reader drops them
    # too; it read the processor's output with no lateness, moved on by its markers alone.
    assert run.results == answer


def test_at_least_once_the_result_counts_the_copies_a_re_run_wrote(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    run = bounded_run(spark, workspace, tmp_path, "at_least_once", seed=7)
    answer = known_answer(EVENTS)

    # Nothing is lost either way (`bounded_run` found every kept event in the middle stream).
    # The aggregation counted every record of the middle stream, copies included (a re-run
    # writes them before the filter's marker for that micro-batch, so none is late, with no
    # lateness): the counts are the answer plus the copies, window by window, and the sums
    # are at least the answer's.
    assert {key: n for key, (n, _) in run.results.items()} == run.middle_counts
    assert sum(n for n, _ in run.results.values()) == (
        sum(n for n, _ in answer.values()) + run.copies_in_middle
    )
    for key, (n, total) in answer.items():
        assert run.results[key][0] >= n and run.results[key][1] >= total


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)
def test_soak_exactly_once_with_more_kills_and_events(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    events = 1_000_000
    run = run_with_kills(
        spark,
        workspace,
        tmp_path,
        run=uuid.uuid4().hex[:8],
        semantics="exactly_once",
        events=events,
        kills=15,
        batch=20_000,
        seed=60,
    )
    answer = known_answer(events)

    print("soak exactly_once:", run.summary(answer))
    assert run.results == answer
