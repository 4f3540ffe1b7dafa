"""The bus layer: everything that talks to Kafka. Streams are topics, buckets are partitions.

The local broker, stream administration, the publisher, the checkpointed reader, piping to a
command, and dead-letter routing for Python readers.
"""
