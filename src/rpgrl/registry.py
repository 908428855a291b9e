"""A registry by name: a plain dict filled by a decorator, loud on unknown or duplicate names.

Used for losses (`rpgrl.objectives.LOSSES`), advantage estimators (`rpgrl.advantages.ADVANTAGES`) and reward
functions. Imports nothing from the rest of the package so every layer may use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """Name -> callable. `get` on an unknown name raises a ValueError listing the valid names."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        if not isinstance(name, str) or not name:  # a non-string name would break every later lookup's listing
            raise ValueError(f"{self.kind} names are non-empty strings, got {name!r}")

        def deco(fn: F) -> F:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = fn
            return fn

        return deco

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name (a list)
            raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(sorted(self._items))}") from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> list[str]:
        return sorted(self._items)
