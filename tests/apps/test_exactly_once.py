"""Exactly-once across apps connected by streams, with their drivers killed by kill -9.

A stateless filter app writes a derived stream, the middle stream; aggregation apps read it
into result tables (see `crash_pipeline`). Each app is killed once while it runs and
restarted. The filter is killed after its micro-batch wrote part of its records and before
Spark recorded the batch done: its re-run writes the records again, so the middle stream
holds copies. With `exactly_once` (the default) a reader drops them by record id and the
result equals the answer computed in plain Python. With `at_least_once` the reader keeps
them: the result counts each copy that was written. The same holds when the aggregation is a
processor, which drops the copies in its keys' state, and a third app sums its productions.

Why one kill each suffices: a kill anywhere else in the filter's micro-batch either leaves
nothing written (the re-run writes the batch once) or comes after the commit (no re-run),
so the kill after the write is the one that makes copies, and its checkpoint shows that it
came before the commit. The processor's kill is the same moment for its productions. A SQL
aggregation is killed after its micro-batch appended to its result table and before Spark
recorded it done: its re-run finds the batch there, writes nothing, and must still commit
the batch's state for the app to go on. The soak run kills each app 15 times.
"""

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from tests.apps.crash_pipeline import CrashRun, Pipeline, known_answer, run_with_kills

# Enough events for a few micro-batches of each app before and after a kill, and for another
# kill when one comes after Spark recorded the batch done: 12 minutes of event time, a minute
# per micro-batch of the filter.
EVENTS = 24_000
BATCH = 2_000
KILLS = 1
# On a busy machine the run takes far longer than usual.
pytestmark = pytest.mark.timeout(3600)


def bounded_run(
    spark: SparkSession, workspace: Workspace, folder: Path, pipeline: Pipeline
) -> CrashRun:
    """The CI-sized crash run: EVENTS events, each app killed KILLS times at its write, then
    checked that the kills made copies and that no kept event is missing from the middle
    stream."""
    run = run_with_kills(
        spark,
        workspace,
        folder,
        run=uuid.uuid4().hex[:8],
        events=EVENTS,
        kills=KILLS,
        batch=BATCH,
        pipeline=pipeline,
    )
    answer = known_answer(run.events)
    print(f"{pipeline.value}:", run.summary(answer))
    assert all(kills == KILLS for kills in run.kills.values()), run.kills
    # The middle stream has every kept event, under one id each, and the copies the filter's
    # re-run wrote.
    assert len(run.middle_ids) == sum(n for n, _ in answer.values())
    assert run.copies_in_middle > 0
    return run


@pytest.fixture(scope="module")
def sql_run(
    spark: SparkSession, workspace: Workspace, tmp_path_factory: pytest.TempPathFactory
) -> CrashRun:
    """The filter feeding an `exactly_once` and an `at_least_once` SQL aggregation."""
    return bounded_run(spark, workspace, tmp_path_factory.mktemp("crash"), Pipeline.SQL)


def test_exactly_once_the_result_equals_the_answer_whatever_the_kills(sql_run: CrashRun) -> None:
    """Kills: the filter once, after its micro-batch wrote part of its records to the middle
    stream (its re-run writes them again: the copies); the aggregation once, after its
    micro-batch appended to the result table (its re-run writes nothing twice)."""
    # No event lost, none counted twice: the copies were dropped by the aggregation's reader.
    assert sql_run.results["exactly_once"] == known_answer(sql_run.events)


def test_at_least_once_the_result_counts_the_copies_a_re_run_wrote(sql_run: CrashRun) -> None:
    """The same run's middle stream, read by an `at_least_once` aggregation, itself killed
    once after its micro-batch appended to the result table, as the test above kills its
    own."""
    results = sql_run.results["at_least_once"]
    answer = known_answer(sql_run.events)

    # Nothing is lost either way (`bounded_run` found every kept event in the middle stream).
    # The aggregation counted every record of the middle stream, copies included (a re-run
    # writes them before the filter's marker for that micro-batch, so none is late, with no
    # lateness), and its own re-run added nothing: the counts are the answer plus the
    # copies, window by window, and the sums are at least the answer's.
    assert {key: n for key, (n, _) in results.items()} == sql_run.middle_counts
    assert sum(n for n, _ in results.values()) == (
        sum(n for n, _ in answer.values()) + sql_run.copies_in_middle
    )
    for key, (n, total) in answer.items():
        assert results[key][0] >= n and results[key][1] >= total


def test_exactly_once_a_processor_and_the_app_reading_it_count_each_event_once(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    """Kills: the filter once, as above (the copies in the middle stream); the processor
    once, after its micro-batch produced to the result stream (its re-run produces the same
    records again, with the same ids). The third app is not killed: it is a SQL aggregation
    like the one the test above kills, and is run once to the end of the result stream."""
    run = bounded_run(spark, workspace, tmp_path, Pipeline.PROCESSOR)

    # The processor dropped the middle stream's copies by id, and its own productions that a
    # re-run wrote again carry the ids of the first run, so the third app's reader drops them
    # too; it read the processor's output with no lateness, moved on by its markers alone.
    assert run.copies_in_results > 0
    assert run.results["total"] == known_answer(run.events)


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
        events=events,
        kills=15,
        batch=20_000,
    )
    answer = known_answer(run.events)

    print("soak exactly_once:", run.summary(answer))
    assert run.results["exactly_once"] == answer
