"""Fixtures of the config tests, kept in their fixture modules."""

from tests.hdfs_cluster import hdfs_cluster
from tests.s3_stand_in import s3_stand_in

__all__ = ["hdfs_cluster", "s3_stand_in"]
