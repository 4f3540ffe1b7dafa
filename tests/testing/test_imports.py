"""`millrace.testing` loads what a tester needs: the processor tester no Spark or Kafka."""

from collections.abc import Callable

import millrace.testing
from millrace.testing import processor, sql


def test_importing_the_processor_tester_does_not_load_spark_kafka_or_redis(
    clients_loaded: Callable[[str], list[str]],
) -> None:
    assert clients_loaded("from millrace.testing import ProcessorTester") == []
    assert clients_loaded("from millrace.testing.processor import ProcessorTester") == []


def test_the_sql_tester_comes_from_the_same_place_with_spark(
    clients_loaded: Callable[[str], list[str]],
) -> None:
    assert "pyspark" in clients_loaded("from millrace.testing import SqlAppTester")
    assert millrace.testing.SqlAppTester is sql.SqlAppTester
    assert millrace.testing.ProcessorTester is processor.ProcessorTester


def test_each_module_lists_its_public_names() -> None:
    assert millrace.testing.__all__ == ["ProcessorTester", "SqlAppResult", "SqlAppTester"]
    assert processor.__all__ == ["ProcessorTester"]
    assert sql.__all__ == ["CLOSING_RECORD_ID", "SqlAppResult", "SqlAppTester"]
