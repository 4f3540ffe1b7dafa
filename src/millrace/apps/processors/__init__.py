"""Processors on Spark: bucketed keys and their state, timers, wake-ups, outputs, batch runs."""
