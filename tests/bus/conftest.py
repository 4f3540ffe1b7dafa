"""Fixtures of the bus tests, kept in their fixture modules."""

from tests.bus.secured_bus import secured_bus

__all__ = ["secured_bus"]
