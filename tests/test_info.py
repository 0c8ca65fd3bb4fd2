"""``MPI.Info``: the standard's calls, the mapping interface, ``INFO_NULL`` and ``INFO_ENV``,
and the helpers other modules use (``info_items``, ``new_info``)."""

from __future__ import annotations

import pickle
import socket
import sys
from typing import Any

import pytest

from ipympi import MPI
from ipympi.mpi.info import info_items, new_info


def error_class(fn: Any, *args: Any) -> int:
    with pytest.raises(MPI.Exception) as info:
        fn(*args)
    return info.value.Get_error_class()


def test_calls() -> None:
    info = MPI.Info.Create()
    assert info and info.Get_nkeys() == 0 and info.Get("key") is None
    info.Set("b", "2")
    info.Set("a", "1")
    info.Set("b", "3")  # a key set again keeps its place
    assert [info.Get_nthkey(i) for i in range(info.Get_nkeys())] == ["b", "a"]
    assert info.Get("b") == "3"
    dup = info.Dup()
    assert dup != info and dup.items() == info.items()
    info.Delete("b")
    assert info.items() == [("a", "1")] and dup.Get("b") == "3"
    assert error_class(info.Delete, "b") == MPI.ERR_INFO_NOKEY
    assert error_class(info.Get_nthkey, 1) == MPI.ERR_ARG
    info.Free()
    assert info == MPI.INFO_NULL
    dup.Free()


def test_keys_and_values_are_checked() -> None:
    info = MPI.Info.Create()
    info.Set("k" * MPI.MAX_INFO_KEY, "v" * MPI.MAX_INFO_VAL)
    info.Set("empty value", "")
    assert error_class(info.Set, "k" * (MPI.MAX_INFO_KEY + 1), "v") == MPI.ERR_INFO_KEY
    assert error_class(info.Set, "   ", "v") == MPI.ERR_INFO_KEY
    assert error_class(info.Get, "") == MPI.ERR_INFO_KEY
    assert error_class(info.Set, "k", "v" * (MPI.MAX_INFO_VAL + 1)) == MPI.ERR_INFO_VALUE
    for bad in ((1, "v"), ("k", 1)):
        with pytest.raises(TypeError):
            info.Set(*bad)
    info.Free()


def test_create_from_items() -> None:
    pairs = [("x", "1"), ("y", "2")]
    for items in (dict(pairs), pairs, MPI.Info.Create(pairs)):
        assert MPI.Info.Create(items).items() == pairs
    for bad in (123, [1, 2], {"a": 1}, "ab"):
        with pytest.raises(TypeError):
            MPI.Info.Create(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MPI.Info.Create([("a", "b", "c")])  # type: ignore[list-item]


def test_mapping_interface() -> None:
    info = MPI.Info.Create()
    info["k1"] = "v1"
    info.update([("k2", "v2")], k3="v3")
    assert len(info) == 3 and "k2" in info and list(info) == ["k1", "k2", "k3"]
    assert info.keys() == ["k1", "k2", "k3"] and info.values() == ["v1", "v2", "v3"]
    assert info["k1"] == "v1" and info.get("nope") is None and info.get("nope", 5) == 5
    assert info.pop("k1") == "v1" and info.pop("k1", "gone") == "gone"
    assert info.popitem() == ("k3", "v3")
    del info["k2"]
    for raising in (lambda: info["k2"], lambda: info.pop("k2"), info.popitem):
        with pytest.raises(KeyError):
            raising()
    with pytest.raises(KeyError):
        del info["k2"]
    info.update({"a": "1"})
    copy = info.copy()
    assert copy.items() == info.items() and copy != info
    info.clear()
    assert len(info) == 0
    info.Free()
    copy.Free()


def test_info_null() -> None:
    null = MPI.INFO_NULL
    assert not null and len(null) == 0 and "k" not in null and list(null) == []
    assert null.keys() == null.values() == null.items() == []
    assert null.get("k") is None and null.pop("k", None) is None and null.copy() == null
    null.clear()
    for raising in (
        lambda: null["k"],
        lambda: null.__setitem__("k", "v"),
        lambda: null.__delitem__("k"),
        lambda: null.update([]),
        lambda: null.pop("k"),
        null.popitem,
    ):
        with pytest.raises(KeyError):
            raising()
    calls = [
        (null.Free, ()), (null.Dup, ()), (null.Get, ("k",)), (null.Set, ("k", "v")),
        (null.Delete, ("k",)), (null.Get_nkeys, ()), (null.Get_nthkey, (0,)),
    ]  # fmt: skip
    for call, args in calls:
        assert error_class(call, *args) == MPI.ERR_INFO


def test_info_env() -> None:
    env = MPI.INFO_ENV
    assert env and env.Get("host") == socket.gethostname()
    assert env.Get("command") == sys.executable and env.Get("maxprocs") == "1"
    assert str(env.Get("thread_level")).startswith("MPI_THREAD_")
    for call, args in ((env.Set, ("k", "v")), (env.Delete, ("host",))):
        assert error_class(call, *args) == MPI.ERR_INFO
    assert error_class(MPI.Info(env).Free) == MPI.ERR_INFO
    dup = env.Dup()
    dup.Set("k", "v")  # a copy is writable
    dup.Free()
    created = MPI.Info.Create_env(["prog", "-x", "1"])
    assert created.Get("command") == "prog" and created.Get("argv") == "-x 1"
    assert MPI.Info.Create_env("prog").Get("argv") is None
    created.Free()


def test_subclasses_and_pickling() -> None:
    global MyInfo

    class MyInfo(MPI.Info):  # type: ignore[no-redef]
        pass

    mine = MyInfo.Create({"a": "1"})
    for made in (
        mine,
        mine.Dup(),
        mine.copy(),
        MyInfo.Create_env(),
        pickle.loads(pickle.dumps(mine)),
    ):
        assert type(made) is MyInfo
    assert pickle.loads(pickle.dumps(mine)).items() == [("a", "1")]
    assert pickle.loads(pickle.dumps(MPI.INFO_ENV)) is MPI.INFO_ENV


def test_helpers_for_other_modules() -> None:
    assert info_items(MPI.INFO_NULL, "Set_info") == {}
    info = MPI.Info.Create({"a": "1"})
    items = info_items(info, "Set_info")
    items["b"] = "2"  # a copy
    assert info.items() == [("a", "1")]
    with pytest.raises(TypeError):
        info_items({"a": "1"}, "Set_info")
    made = new_info({"x": "y"})
    assert type(made) is MPI.Info and made.items() == [("x", "y")]
