import sys
from pathlib import Path

from millrace.bus.pipe import pipe_to_command
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.settings import Settings

# Appends each JSON line it reads to a file: the command a user would pipe into.
APPEND = "import sys; open(sys.argv[1], 'a').writelines(sys.stdin)"
# Reads three lines, then fails: a command that dies part-way.
FAIL_AFTER_THREE = "import sys; [sys.stdin.readline() for _ in range(3)]; sys.exit(3)"


def test_records_are_piped_as_json_lines_and_the_next_run_resumes(
    settings: Settings,
    stream_name: str,
    tmp_path: Path,
) -> None:
    create_stream(settings, stream_name)
    output = tmp_path / "out.jsonl"
    with Publisher(stream_name, settings=settings) as publisher:
        for number in range(5):
            publisher.send({"n": number})

    result = pipe_to_command(
        stream_name,
        "g",
        [sys.executable, "-c", APPEND, str(output)],
        settings=settings,
        checkpoint_every=2,
    )
    assert (result.records, result.exit_code) == (5, 0)
    assert output.read_text().splitlines() == [f'{{"n": {n}}}' for n in range(5)]

    with Publisher(stream_name, settings=settings) as publisher:
        publisher.send({"n": 5})
    pipe_to_command(
        stream_name, "g", [sys.executable, "-c", APPEND, str(output)], settings=settings
    )
    assert output.read_text().splitlines()[-1] == '{"n": 5}'
    assert len(output.read_text().splitlines()) == 6


def test_a_failing_command_gets_the_records_since_the_last_checkpoint_again(
    settings: Settings,
    stream_name: str,
    tmp_path: Path,
) -> None:
    create_stream(settings, stream_name)
    with Publisher(stream_name, settings=settings) as publisher:
        for number in range(10):
            publisher.send({"n": number})

    failed = pipe_to_command(
        stream_name,
        "g",
        [sys.executable, "-c", FAIL_AFTER_THREE],
        settings=settings,
        checkpoint_every=100,
    )
    assert failed.exit_code == 3

    output = tmp_path / "out.jsonl"
    retried = pipe_to_command(
        stream_name, "g", [sys.executable, "-c", APPEND, str(output)], settings=settings
    )
    assert retried.exit_code == 0
    assert len(output.read_text().splitlines()) == 10
