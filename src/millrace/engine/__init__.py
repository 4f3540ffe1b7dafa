"""The engine layer: the only place that builds a SparkSession or knows Spark configuration.

It turns streams into streaming DataFrames (with dead-letter routing, `engine.streams`), or an
event-time range of them into batch DataFrames, and writes them back (`engine.writes`), under
each input's low watermark; `engine.kafka` assembles every Spark Kafka reader and writer,
`engine.checkpoint_log` reads Spark's checkpoints as files, and `engine.spark_internals` is
the one adapter to Spark's private API.
"""
