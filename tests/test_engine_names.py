"""The variables a user defined on a rank, looked at after each cell (no processes)."""

from __future__ import annotations

from types import SimpleNamespace

from ipympi.notebook.engine.names import UserNames


def shell() -> SimpleNamespace:
    """What :class:`UserNames` reads of an IPython shell: a namespace with hidden names."""
    hidden = {"MPI": object(), "rank": 0, "In": [], "get_ipython": print}
    return SimpleNamespace(user_ns={**hidden, "_i1": "x", "_1": 1}, user_ns_hidden=hidden)


def test_the_users_names_are_those_who_lists() -> None:
    s, names = shell(), UserNames()
    assert names.look(s) == frozenset()
    s.user_ns.update(a=1, _i2="a = 1", _hidden=3)
    assert names.look(s) == {"a"}
    s.user_ns["b"] = 2
    del s.user_ns["a"]
    assert names.look(s) == {"b"}


def test_a_predefined_name_the_user_rebinds_is_theirs() -> None:
    s, names = shell(), UserNames()
    s.user_ns["rank"] = 5  # no longer the rank ipympi defined
    assert names.look(s) == {"rank"}
    s.user_ns["rank"] = s.user_ns_hidden["rank"]
    assert names.look(s) == frozenset()
