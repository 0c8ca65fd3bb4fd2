"""The variables a user defined on a rank, as the controller keeps them.

An engine's reply says which names its user has defined whenever they change
(:meth:`ipympi.engine.shell.Engine.note_names`), so that the notice of a fresh
world can say which variables were lost with the old one, when the old ranks
can no longer be asked.
"""

from __future__ import annotations

from typing import Any

__all__ = ["UserNames"]


class UserNames:
    """The names the user defined in a shell (those ``%who`` lists), looked at after each
    cell: only the keys added or removed since the last look are examined in Python (a
    namespace gains IPython's ``_iN`` and ``_N`` with every cell)."""

    def __init__(self) -> None:
        self._keys: set[str] = set()
        self._plain: set[str] = set()  # the keys that do not start with "_"
        self._rebound: set[str] = set()  # hidden names the user bound to values of their own
        self._names: frozenset[str] = frozenset()

    def look(self, shell: Any) -> frozenset[str]:
        """The user's names in ``shell`` (an IPython shell: its ``user_ns`` and
        ``user_ns_hidden``) now."""
        namespace, hidden = shell.user_ns, shell.user_ns_hidden
        keys = namespace.keys()
        added, removed = keys - self._keys, self._keys - keys
        self._keys -= removed
        self._keys |= added
        plain = {name for name in added if not name.startswith("_")}
        rebound = {name for name in hidden if namespace.get(name, hidden[name]) is not hidden[name]}
        if plain or removed & self._plain or rebound != self._rebound:
            self._plain -= removed
            self._plain |= plain
            self._rebound = rebound
            self._names = frozenset((self._plain - hidden.keys()) | (rebound & self._plain))
        return self._names
