"""A processor's key: what its callbacks are called for, and its state and timers kept under.

Its type is the user's: the value a record's key column holds, or whatever an `Input`'s key
function returns.
"""

from __future__ import annotations

from typing import Any

Key = Any  # Any: whatever a record's key column holds or its Input's key function returns
"""A processor's key: its callbacks get it, its state and timers are kept under it."""
