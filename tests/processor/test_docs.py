"""The code of docs/processor.md runs as the page says: its complete example and its classes."""

import re
from pathlib import Path

import millrace
from millrace.testing import ProcessorTester

PAGE = Path(__file__).parents[2] / "docs" / "processor.md"
T0 = 1_767_225_600_000


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_the_complete_example_runs_and_its_assertions_hold() -> None:
    [example] = [block for block in _blocks() if block.startswith("from millrace import")]
    exec(compile(example, str(PAGE), "exec"), {})


def test_the_monoid_class_of_the_page_counts_per_key() -> None:
    [monoid] = [block for block in _blocks() if "class QueryCounts(Processor)" in block]
    namespace = {"Processor": millrace.Processor, "Input": millrace.Input}
    exec(compile(monoid, str(PAGE), "exec"), namespace)
    tester = ProcessorTester(namespace["QueryCounts"])
    tester.feed("queries", [{"query": "cats", "ts": T0}, {"query": "cats", "ts": T0 + 1}])
    tester.run_batch()
    assert tester.values("query_totals") == [{"query": "cats", "count": 2}]


def test_the_declared_aggregates_of_the_page_total_each_user_s_payments() -> None:
    [declared] = [block for block in _blocks() if "class Spending(Processor)" in block]
    namespace: dict = {}
    exec(compile(declared, str(PAGE), "exec"), namespace)
    tester = ProcessorTester(namespace["Spending"])
    tester.feed("payments", [{"user": "ann", "amount": n, "ts": T0} for n in (5, 40, 7, 12)])
    tester.run_batch()
    assert tester.values("spending") == [
        {"user": "ann", "payments": 4, "total": 64, "largest": 40, "top": [40, 12, 7]}
    ]
