"""Fixtures of the warehouse tests, kept in their fixture modules."""

from tests.s3_stand_in import s3_stand_in

__all__ = ["s3_stand_in"]
