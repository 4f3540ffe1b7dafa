"""Per-key state of a processor: the `ValueState`, `ListState` and `MapState` declarations.

A processor declares its state as class attributes; each declaration is named after its
attribute, holds values of declared Python types, and may expire them with a `ttl` counted in
processing time since the value was last written. Inside a callback, the attribute gives the
current key's state only.

This module also owns `KeyState`, one key's state as the engine holds it during a micro-batch,
and its stored form: plain JSON-able data, so the Spark runtime can keep it in its state store.
Every state's stored form keeps the processing time of each write next to the value:

- value state: `[value, written_ms]`
- list state: `[[element, written_ms], ...]`
- map state: `[[map_key, value, written_ms], ...]` (pairs, so that map keys keep their type)

Example:
    >>> from millrace.processor import Processor
    >>> class Sessions(Processor):
    ...     last_seen = ValueState(int, ttl="30m")
    ...     pages = ListState(str)
    ...     clicks = MapState(key=str, value=int, ttl="7d")
    >>> sorted(Sessions.states())
    ['clicks', 'last_seen', 'pages']
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, ClassVar, Generic, TypeVar

from millrace.config.durations import parse_duration_ms
from millrace.errors import ConfigError, ProcessorError
from millrace.records import JsonObject

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

_SCALAR_TYPES = (str, int, float, bool)
_MAP_KEY_TYPES = (str, int, float, bool)
_KEY_STATE_ATTRIBUTE = "_millrace_key_state"
_SUPPORTED = "str, int, float, bool, list, dict, None, Any, list[T], dict[str, T] or a union"

_Stored = Any  # Any: a state's stored form, JSON-able data of its kind's shape (module's notes)
_Live = Any  # Any: a state's decoded form, of its kind's shape (see each `_decode`)


class StateDeclaration:
    """What the three state declarations share: the attribute's name, the value type, the TTL.

    Reading the attribute on a processor instance inside a callback gives a handle on the current
    key's state; outside a callback it is an error. Assigning to the attribute is an error too:
    state is written through its handle (`self.total.set(3)`, `self.counts[k] = 3`).
    """

    kind: ClassVar[str]

    def __init__(self, value: object, *, ttl: str | None) -> None:
        self.value_type = value
        self.ttl = ttl
        self.ttl_ms: int | None = None
        self.name = ""
        self.owner = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.owner = owner.__name__

    def __get__(
        self, instance: object, owner: type | None = None
    ) -> Any:  # Any: the kind's handle; mypy cannot infer its T from a declared type
        if instance is None:
            return self
        state: KeyState | None = instance.__dict__.get(_KEY_STATE_ATTRIBUTE)
        if state is None:
            raise ProcessorError(
                f"state {self.owner}.{self.name} was read outside a callback",
                hint="read and write state inside on_record, on_timer or on_aggregate, where "
                "it is the current key's state",
            )
        return self._handle(state)

    def __set__(self, instance: object, value: object) -> None:
        raise ProcessorError(
            f"state {self.owner}.{self.name} cannot be assigned",
            hint=f"write it through its handle: {self._write_example()}",
        )

    def _handle(self, state: KeyState) -> object:
        raise NotImplementedError

    def _write_example(self) -> str:
        raise NotImplementedError

    def _decode(self, stored: _Stored) -> _Live:
        raise NotImplementedError

    def _encode(self, live: _Live) -> _Stored:
        raise NotImplementedError

    def _expire(self, live: _Live, now_ms: int) -> _Live:
        raise NotImplementedError

    def _visible(self, live: _Live) -> object:
        raise NotImplementedError

    def _is_empty(self, live: _Live) -> bool:
        return not live

    def _types(self) -> dict[str, object]:
        return {"value": self.value_type}

    def _check_value(self, value: object, role: str = "value") -> None:
        declared = self._types()[role]
        if not _matches(value, declared):
            raise ProcessorError(
                f"state {self.owner}.{self.name} holds {role}s of type {_type_name(declared)}, "
                f"got {value!r} of type {type(value).__name__}",
                hint=f"write a {_type_name(declared)}, or change the declaration of "
                f"{self.name} in {self.owner}",
            )

    def validate(self) -> None:
        """Check the declared types and TTL; raises `ProcessorError` naming the attribute."""
        for role, declared in self._types().items():
            allowed = _MAP_KEY_TYPES if role == "key" else None
            if not _is_supported(declared, allowed):
                expected = "str, int, float or bool" if allowed else _SUPPORTED
                raise ProcessorError(
                    f"state {self.owner}.{self.name} declares {role} type "
                    f"{_type_name(declared)}, which state cannot hold",
                    hint=f"declare {expected}: state is kept as JSON",
                )
        if self.ttl is not None:
            try:
                self.ttl_ms = parse_duration_ms(self.ttl, what="ttl")
            except ConfigError as error:
                raise ProcessorError(
                    f"state {self.owner}.{self.name} has ttl {self.ttl!r}, which is not a duration",
                    hint=error.hint,
                ) from None
            if self.ttl_ms <= 0:
                raise ProcessorError(
                    f"state {self.owner}.{self.name} has ttl {self.ttl!r}, which is not positive",
                    hint="give a duration such as '30m' or '7d', or leave ttl out to keep values",
                )

    def _alive(self, written_ms: int, now_ms: int) -> bool:
        return self.ttl_ms is None or now_ms < written_ms + self.ttl_ms


class ValueState(StateDeclaration, Generic[T]):
    """One value per key, of the declared type.

    Example:
        >>> from millrace.processor import Processor
        >>> class Totals(Processor):
        ...     total = ValueState(int)
        >>> totals, state = Totals(), KeyState(Totals.states(), {"total": [3, 0]}, now_ms=10)
        >>> bind_key_state(totals, state)
        >>> totals.total.set(totals.total.get(0) + 4)
        >>> state.stored()
        {'total': [7, 10]}
    """

    kind = "value"

    def __init__(self, value: type[T] | object, *, ttl: str | None = None) -> None:
        super().__init__(value, ttl=ttl)

    def _handle(self, state: KeyState) -> ValueHandle[T]:
        return ValueHandle(self, state)

    def _write_example(self) -> str:
        return f"self.{self.name}.set(value)"

    def _decode(self, stored: _Stored) -> _Live:
        return list(stored) if stored is not None else None

    def _encode(self, live: _Live) -> _Stored:
        return live

    def _expire(self, live: _Live, now_ms: int) -> _Live:
        return live if live is not None and self._alive(live[1], now_ms) else None

    def _visible(self, live: _Live) -> object:
        return None if live is None else live[0]

    def _is_empty(self, live: _Live) -> bool:
        return live is None


class ListState(StateDeclaration, Generic[T]):
    """A list per key, of elements of the declared type; with `ttl`, each element expires alone.

    Example:
        >>> from millrace.processor import Processor
        >>> class Recent(Processor):
        ...     pages = ListState(str, ttl="1h")
        >>> recent = Recent()
        >>> bind_key_state(recent, KeyState(Recent.states(), None, now_ms=0))
        >>> recent.pages.append("/")
        >>> recent.pages.get()
        ['/']
    """

    kind = "list"

    def __init__(self, element: type[T] | object, *, ttl: str | None = None) -> None:
        super().__init__(element, ttl=ttl)

    def _handle(self, state: KeyState) -> ListHandle[T]:
        return ListHandle(self, state)

    def _write_example(self) -> str:
        return f"self.{self.name}.append(element) or self.{self.name}.set(elements)"

    def _decode(self, stored: _Stored) -> _Live:
        return [list(entry) for entry in stored or ()]

    def _encode(self, live: _Live) -> _Stored:
        return live

    def _expire(self, live: _Live, now_ms: int) -> _Live:
        return [entry for entry in live if self._alive(entry[1], now_ms)]

    def _visible(self, live: _Live) -> object:
        return [element for element, _ in live]


class MapState(StateDeclaration, Generic[K, V]):
    """A map per key, with keys and values of the declared types; with `ttl`, entries expire alone.

    Example:
        >>> from millrace.processor import Processor
        >>> class WindowCounter(Processor):
        ...     counts = MapState(key=int, value=int)
        >>> counter = WindowCounter()
        >>> bind_key_state(counter, KeyState(WindowCounter.states(), None, now_ms=0))
        >>> counter.counts[1000] = counter.counts.get(1000, 0) + 1
        >>> dict(counter.counts)
        {1000: 1}
    """

    kind = "map"

    def __init__(
        self, *, key: type[K] | object, value: type[V] | object, ttl: str | None = None
    ) -> None:
        super().__init__(value, ttl=ttl)
        self.key_type = key

    def _types(self) -> dict[str, object]:
        return {"key": self.key_type, "value": self.value_type}

    def _handle(self, state: KeyState) -> MapHandle[K, V]:
        return MapHandle(self, state)

    def _write_example(self) -> str:
        return f"self.{self.name}[map_key] = value"

    def _decode(self, stored: _Stored) -> _Live:
        return {entry[0]: [entry[1], entry[2]] for entry in stored or ()}

    def _encode(self, live: _Live) -> _Stored:
        return [[map_key, value, written] for map_key, (value, written) in live.items()]

    def _expire(self, live: _Live, now_ms: int) -> _Live:
        return {map_key: entry for map_key, entry in live.items() if self._alive(entry[1], now_ms)}

    def _visible(self, live: _Live) -> object:
        return {map_key: value for map_key, (value, _) in live.items()}


class ValueHandle(Generic[T]):
    """The current key's value of a `ValueState`."""

    def __init__(self, declaration: ValueState[T], state: KeyState) -> None:
        self._declaration = declaration
        self._state = state

    def get(self, default: T | None = None) -> T | None:
        """The value, or `default` when none was set (or it expired)."""
        live = self._state.live(self._declaration)
        return default if live is None else live[0]

    def set(self, value: T) -> None:
        """Replace the value; raises `ProcessorError` if it is not of the declared type."""
        self._declaration._check_value(value)
        self._state.replace(self._declaration, [value, self._state.now_ms])

    def clear(self) -> None:
        """Remove the value."""
        self._state.replace(self._declaration, None)

    def exists(self) -> bool:
        """True when a value is set and has not expired."""
        return self._state.live(self._declaration) is not None


class ListHandle(Generic[T]):
    """The current key's list of a `ListState`; iterate it or call `get()` for a copy."""

    def __init__(self, declaration: ListState[T], state: KeyState) -> None:
        self._declaration = declaration
        self._state = state

    def get(self) -> list[T]:
        """A copy of the list's elements, oldest first."""
        return [element for element, _ in self._state.live(self._declaration)]

    def append(self, element: T) -> None:
        """Add `element` at the end."""
        self._declaration._check_value(element)
        self._state.live(self._declaration).append([element, self._state.now_ms])

    def extend(self, elements: typing.Iterable[T]) -> None:
        """Add `elements` at the end, in order."""
        for element in elements:
            self.append(element)

    def set(self, elements: typing.Iterable[T]) -> None:
        """Replace the whole list."""
        elements = list(elements)
        for element in elements:
            self._declaration._check_value(element)
        now_ms = self._state.now_ms
        self._state.replace(self._declaration, [[element, now_ms] for element in elements])

    def clear(self) -> None:
        """Remove every element."""
        self._state.replace(self._declaration, [])

    def exists(self) -> bool:
        """True when the list has at least one element."""
        return bool(self._state.live(self._declaration))

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())

    def __len__(self) -> int:
        return len(self._state.live(self._declaration))


class MapHandle(MutableMapping[K, V]):
    """The current key's map of a `MapState`: a `dict`-like view (`get`, `pop`, `items`, ...)."""

    def __init__(self, declaration: MapState[K, V], state: KeyState) -> None:
        self._declaration = declaration
        self._state = state

    def __getitem__(self, map_key: K) -> V:
        value: V = self._state.live(self._declaration)[map_key][0]
        return value

    def __setitem__(self, map_key: K, value: V) -> None:
        self._declaration._check_value(map_key, "key")
        self._declaration._check_value(value)
        self._state.live(self._declaration)[map_key] = [value, self._state.now_ms]

    def __delitem__(self, map_key: K) -> None:
        del self._state.live(self._declaration)[map_key]

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._state.live(self._declaration)))

    def __len__(self) -> int:
        return len(self._state.live(self._declaration))

    def __contains__(self, map_key: object) -> bool:
        return map_key in self._state.live(self._declaration)

    def exists(self) -> bool:
        """True when the map has at least one entry."""
        return bool(self._state.live(self._declaration))


class KeyState:
    """One key's declared state during a micro-batch, decoded from its stored form on first use.

    `now_ms` is the micro-batch's processing time: writes are stamped with it, and values whose
    TTL has run out by then are invisible. `stored()` gives the new stored form, with expired
    values removed.

    Example:
        >>> from millrace.processor import Processor
        >>> class Totals(Processor):
        ...     total = ValueState(int, ttl="1s")
        >>> KeyState(Totals.states(), {"total": [3, 0]}, now_ms=10).stored()
        {'total': [3, 0]}
        >>> KeyState(Totals.states(), {"total": [3, 0]}, now_ms=5000).stored()
        {}
    """

    def __init__(
        self,
        declarations: Mapping[str, StateDeclaration],
        stored: Mapping[str, _Stored] | None,
        *,
        now_ms: int,
    ) -> None:
        self.declarations = declarations
        self.now_ms = now_ms
        self._stored = dict(stored or {})
        self._live: dict[str, _Live] = {}

    def live(self, declaration: StateDeclaration) -> _Live:
        """The decoded, unexpired state of `declaration`, which handles read and change."""
        name = declaration.name
        if name not in self._live:
            self._live[name] = declaration._expire(
                declaration._decode(self._stored.get(name)), self.now_ms
            )
        return self._live[name]

    def replace(self, declaration: StateDeclaration, live: _Live) -> None:
        """Replace the decoded state of `declaration` with `live`."""
        self._live[declaration.name] = live

    def visible(self) -> JsonObject:
        """Every declared state's current value, as a callback would read it."""
        return {
            name: declaration._visible(self.live(declaration))
            for name, declaration in self.declarations.items()
        }

    def snapshot(self) -> dict[str, _Live]:
        """A copy of what callbacks changed so far, for `restore` after a failed callback."""
        return copy.deepcopy(self._live)

    def restore(self, snapshot: dict[str, _Live]) -> None:
        """Undo every change made since `snapshot` was taken."""
        self._live = snapshot

    def stored(self) -> dict[str, _Stored]:
        """The stored form of this key's state; empty states and expired values are left out."""
        stored: dict[str, _Stored] = {}
        for name, declaration in self.declarations.items():
            if name in self._live or declaration.ttl_ms is not None:
                live = self.live(declaration)
                if not declaration._is_empty(live):
                    stored[name] = declaration._encode(live)
            elif name in self._stored:
                stored[name] = self._stored[name]
        return stored


def bind_key_state(processor: object, state: KeyState | None) -> None:
    """Make `state` the key state that `processor`'s declarations read; None unbinds it.

    Example:
        >>> from millrace.processor import Processor
        >>> class Totals(Processor):
        ...     total = ValueState(int)
        >>> totals = Totals()
        >>> bind_key_state(totals, KeyState(Totals.states(), {"total": [3, 0]}, now_ms=0))
        >>> totals.total.get()
        3
    """
    processor.__dict__[_KEY_STATE_ATTRIBUTE] = state


def _matches(value: object, declared: object) -> bool:
    # Checked on every state write: the common one, a value of exactly the declared scalar
    # type, is answered before `typing` is asked anything.
    if type(value) is declared and declared in _SCALAR_TYPES:
        return True
    if declared is Any or declared is object:
        return _is_json_value(value)
    if declared is None or declared is type(None):
        return value is None
    origin = typing.get_origin(declared)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, option) for option in typing.get_args(declared))
    if origin is list:
        (element,) = typing.get_args(declared)
        return isinstance(value, list) and all(_matches(item, element) for item in value)
    if origin is dict:
        key_type, value_type = typing.get_args(declared)
        return isinstance(value, dict) and all(
            _matches(item_key, key_type) and _matches(item, value_type)
            for item_key, item in value.items()
        )
    if declared is bool:
        return isinstance(value, bool)
    if declared is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if declared is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(declared, type) and declared in (str, list, dict):
        return isinstance(value, declared) and _is_json_value(value)
    return False


def _is_json_value(value: object) -> bool:
    if value is None or isinstance(value, _SCALAR_TYPES):
        return True
    if isinstance(value, list):
        return all(_is_json_value(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_json_value(item) for key, item in value.items())
    return False


def _is_supported(declared: object, allowed: tuple[type, ...] | None = None) -> bool:
    if allowed is not None:
        return declared in allowed
    if declared is Any or declared is object or declared is None or declared is type(None):
        return True
    origin = typing.get_origin(declared)
    if origin in (typing.Union, types.UnionType):
        return all(_is_supported(option) for option in typing.get_args(declared))
    if origin is list:
        return _is_supported(typing.get_args(declared)[0])
    if origin is dict:
        key_type, value_type = typing.get_args(declared)
        return key_type is str and _is_supported(value_type)
    return declared in (*_SCALAR_TYPES, list, dict)


def _type_name(declared: object) -> str:
    if isinstance(declared, type) and typing.get_origin(declared) is None:
        return declared.__name__
    return str(declared).replace("typing.", "")
