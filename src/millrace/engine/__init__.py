"""The engine layer: the only place that builds a SparkSession or knows Spark configuration.

It turns streams into streaming DataFrames (with dead-letter routing) and writes them back.
"""
