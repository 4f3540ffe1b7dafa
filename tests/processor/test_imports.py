"""The processor core is plain Python: importing it loads no Kafka, Redis or Spark client.

It runs the same in the in-memory tester and on Spark's executors, so a processor's module
and its unit tests start in a fraction of a second.
"""

from collections.abc import Callable


def test_importing_the_processor_core_loads_neither_kafka_nor_redis_nor_spark(
    clients_loaded: Callable[[str], list[str]],
) -> None:
    assert clients_loaded("import millrace.processor") == []
    assert clients_loaded("import millrace.processor.execution") == []
    assert clients_loaded("from millrace import Input, Processor, Record") == []


def test_the_bus_clients_of_the_top_level_package_load_on_first_use(
    clients_loaded: Callable[[str], list[str]],
) -> None:
    assert clients_loaded("from millrace import Publisher") == ["confluent_kafka"]
