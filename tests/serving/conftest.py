"""Fixtures of the serving tests, kept in their fixture modules."""

from tests.serving.secured_redis import secured_redis

__all__ = ["secured_redis"]
