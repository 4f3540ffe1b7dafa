"""The bus layer: what talks to Kafka from Python. Streams are topics, buckets are partitions.

The local broker, stream administration, the publisher, the checkpointed reader, piping to a
command, dead-letter routing for Python readers, and the watermark markers apps publish.
Spark's own Kafka readers and writers are `millrace.engine.kafka`'s.
"""
