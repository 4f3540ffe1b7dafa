"""The engine layer: the only place that builds a SparkSession or knows Spark configuration.

It turns streams into streaming DataFrames (with dead-letter routing), or an event-time range
of them into batch DataFrames, and writes them back.
"""
