"""The monitor: apps' progress, lag and alerts, read from the bus and the workspace."""
