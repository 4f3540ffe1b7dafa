# The two commands of the README, and the setup step they share.
.PHONY: setup demo test

setup:
	bash scripts/setup.sh

# The main job: the trending-events pipeline (docs/trending.md) live until Ctrl-C.
demo: setup
	.venv/bin/millrace init
	.venv/bin/millrace demo

# The test suite CI runs: lint, type check, then real Kafka broker and real Spark, started
# once per run by each of two workers (pytest-xdist), each taking a test file at a time,
# the slowest first (tests/durations.py); then the docstring examples of src/millrace, with
# no server (tests/doctest_namespace.py).
test: setup
	.venv/bin/ruff check src tests benchmarks examples
	.venv/bin/ruff format --check src tests benchmarks examples
	.venv/bin/mypy
	.venv/bin/python -m pytest --numprocesses 2 --dist loadfile --no-loadscope-reorder
	.venv/bin/python -m pytest --doctest-modules src/millrace
