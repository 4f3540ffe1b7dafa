# The two commands of the README, and the setup step they share.
.PHONY: setup demo test

setup:
	bash scripts/setup.sh

# The main job: the trending-events pipeline (docs/trending.md) live until Ctrl-C.
demo: setup
	.venv/bin/millrace init
	.venv/bin/millrace demo

# The test suite CI runs: lint, type check, then real Kafka broker and real Spark, started
# once per run; then the docstring examples of the packages that have runnable ones, with no
# server (tests/doctest_namespace.py).
test: setup
	.venv/bin/ruff check src tests benchmarks examples
	.venv/bin/ruff format --check src tests benchmarks examples
	.venv/bin/mypy
	.venv/bin/python -m pytest
	.venv/bin/python -m pytest --doctest-modules src/millrace/records.py src/millrace/errors.py \
		src/millrace/config src/millrace/bus src/millrace/serving src/millrace/warehouse src/millrace/sql \
		src/millrace/processor src/millrace/testing src/millrace/monitor src/millrace/api src/millrace/cli
