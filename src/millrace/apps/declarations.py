"""What an app says it reads and writes besides its inputs, for the pipeline's graph.

A SQL app names in its file the serving tables it looks up and fills and the streams it
inserts into; a processor names the serving tables it looks up (the streams it produces to
are known only as it produces). The app's object gives them (`millrace.apps.app.App.declared`)
and the registry keeps them with a deployed app, so that the pipeline view draws what the
running code declares without loading it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Declared:
    """The serving tables an app looks up and fills, and the streams it writes, each sorted.

    Example:
        >>> declared = Declared(looked_up=("classifications",), streams=("trending.scores",))
        >>> Declared.from_json(declared.to_json()) == declared
        True
    """

    looked_up: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    streams: tuple[str, ...] = ()

    def to_json(self) -> dict[str, list[str]]:
        """The declarations as JSON-able data."""
        return {
            "looked_up": list(self.looked_up),
            "served": list(self.served),
            "streams": list(self.streams),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Declared:
        """What `to_json` wrote; a part that is missing or malformed is empty.

        A record of an older millrace has none.
        """
        return cls(
            _names(data.get("looked_up")), _names(data.get("served")), _names(data.get("streams"))
        )


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(sorted(name for name in value if isinstance(name, str)))
