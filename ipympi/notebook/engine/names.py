"""The variables a user defined on a rank, as the controller keeps them.

An engine's reply says which names its user has defined whenever they change
(:meth:`ipympi.notebook.engine.shell.RankEngine.note_names`), so that the notice of a fresh
world can say which variables were lost with the old one, when the old ranks
can no longer be asked.
"""

from __future__ import annotations

from typing import Any

__all__ = ["UserNames"]


class UserNames:
    """The names the user defined in a shell (those ``%who`` lists), looked at after each
    cell at a cost that does not grow with the namespace.

    A namespace gains IPython's ``_iN`` with every cell, so it only grows, and a dict
    keeps its keys in the order they came: the keys a cell added are those after the
    newest one of the last look. The whole namespace is read again only when a key
    has gone (it holds fewer keys than that count says).
    """

    def __init__(self) -> None:
        self._newest: object = None  # the newest key at the last look
        self._size = 0  # how many keys there were then
        self._plain: set[str] = set()  # the keys that do not start with "_"
        self._rebound: set[str] = set()  # hidden names the user bound to values of their own
        self._names: frozenset[str] = frozenset()

    def look(self, shell: Any) -> frozenset[str]:
        """The user's names in ``shell`` (an IPython shell: its ``user_ns`` and
        ``user_ns_hidden``) now."""
        namespace, hidden = shell.user_ns, shell.user_ns_hidden
        added = []
        for key in reversed(namespace):
            if key == self._newest:
                break
            added.append(key)
        plain = [key for key in added if not key.startswith("_")]
        changed = bool(plain)
        if len(namespace) == self._size + len(added):
            self._plain.update(plain)
        else:  # a key has gone: read them all
            self._plain = {key for key in namespace if not key.startswith("_")}
            changed = True
        self._newest = next(reversed(namespace), None)
        self._size = len(namespace)
        rebound = {name for name in hidden if namespace.get(name, hidden[name]) is not hidden[name]}
        if changed or rebound != self._rebound:
            self._rebound = rebound
            self._names = frozenset((self._plain - hidden.keys()) | (rebound & self._plain))
        return self._names
