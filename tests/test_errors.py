"""Error classes, user error codes, MPI.Exception and error-handler handles."""

from __future__ import annotations

import inspect
import operator
import pickle
from typing import Any

import pytest

from ipympi.core import constants as _constants
from ipympi.core import errors as _errors
from ipympi.core.errors import (
    ERR_ARG,
    ERR_BUFFER,
    ERR_COUNT,
    ERR_ERRHANDLER,
    ERR_LASTCODE,
    ERR_OTHER,
    ERR_RANK,
    ERR_TRUNCATE,
    ERR_UNKNOWN,
    SUCCESS,
    Add_error_class,
    Add_error_code,
    Add_error_string,
    Get_error_class,
    Get_error_string,
    Remove_error_class,
    Remove_error_code,
    Remove_error_string,
    last_used_code,
)
from ipympi.core.errors import Exception as MPIException
from ipympi.mpi.errhandling import (
    ERRHANDLER_NULL,
    ERRORS_ABORT,
    ERRORS_ARE_FATAL,
    ERRORS_RETURN,
    Errhandler,
    mpi_call,
)

PREDEFINED = {
    name: getattr(_errors, name)
    for name in _errors.__all__
    if (name.startswith("ERR_") or name == "SUCCESS")
}
MPI1_CLASSES = [
    "SUCCESS", "ERR_BUFFER", "ERR_COUNT", "ERR_TYPE", "ERR_TAG", "ERR_COMM", "ERR_RANK",
    "ERR_REQUEST", "ERR_ROOT", "ERR_GROUP", "ERR_OP", "ERR_TOPOLOGY", "ERR_DIMS", "ERR_ARG",
    "ERR_UNKNOWN", "ERR_TRUNCATE", "ERR_OTHER", "ERR_INTERN", "ERR_IN_STATUS", "ERR_PENDING",
]  # fmt: skip


# --- error classes -------------------------------------------------------------------------


def test_core_values() -> None:
    assert SUCCESS == 0
    assert ERR_BUFFER == 1
    assert ERR_TRUNCATE == 14
    assert ERR_ARG == 12
    assert ERR_LASTCODE == 1073741823


def test_mpi1_classes_are_distinct_and_ordered() -> None:
    values = [PREDEFINED[name] for name in MPI1_CLASSES]
    assert len(set(values)) == len(values)
    assert all(SUCCESS < v <= ERR_LASTCODE for v in values[1:])


@pytest.mark.parametrize("name", sorted(PREDEFINED))
def test_every_class_maps_to_itself_and_has_a_string(name: str) -> None:
    value = PREDEFINED[name]
    assert Get_error_class(value) == value
    text = Get_error_string(value)
    assert isinstance(text, str) and text
    assert len(text) <= _constants.MAX_ERROR_STRING


def test_strings_differ_for_unknown_and_other() -> None:
    assert Get_error_string(ERR_UNKNOWN) != Get_error_string(ERR_OTHER)


def test_absent_feature_classes_alias_existing_ones() -> None:
    assert _errors.ERR_PROC_FAILED == ERR_UNKNOWN
    assert _errors.ERR_REVOKED == ERR_UNKNOWN
    assert _errors.ERR_ABI == ERR_LASTCODE


@pytest.mark.parametrize("code", [-1, 54, 60, 100, ERR_LASTCODE + 10**6])
def test_invalid_codes_raise_err_arg(code: int) -> None:
    with pytest.raises(MPIException) as info:
        Get_error_class(code)
    assert info.value.Get_error_class() == ERR_ARG
    with pytest.raises(MPIException) as info:
        Get_error_string(code)
    assert info.value.Get_error_class() == ERR_ARG


def test_non_integer_code_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        Get_error_class("12")  # type: ignore[arg-type]


# --- user classes, codes and strings ------------------------------------------------------


def test_add_error_class_and_code() -> None:
    before = last_used_code()
    assert before >= ERR_LASTCODE
    cls = Add_error_class()
    assert cls > ERR_LASTCODE
    assert cls == last_used_code() > before
    assert _errors.ERR_LASTCODE == 1073741823  # never changes
    assert Get_error_class(cls) == cls
    assert Get_error_string(cls) == ""
    code = Add_error_code(cls)
    assert code != cls and code == last_used_code()
    assert Get_error_class(code) == cls
    assert Get_error_string(code) == ""


def test_add_error_code_to_predefined_class() -> None:
    code = Add_error_code(ERR_RANK)
    assert code > ERR_LASTCODE
    assert Get_error_class(code) == ERR_RANK
    exc = MPIException(code)
    assert exc.Get_error_code() == code
    assert exc.Get_error_class() == ERR_RANK


@pytest.mark.parametrize("bad", [SUCCESS, -5, 54, ERR_LASTCODE + 10**6])
def test_add_error_code_needs_a_class(bad: int) -> None:
    with pytest.raises(MPIException) as info:
        Add_error_code(bad)
    assert info.value.error_class == ERR_ARG


def test_add_error_code_refuses_a_code_that_is_not_a_class() -> None:
    code = Add_error_code(Add_error_class())
    with pytest.raises(MPIException):
        Add_error_code(code)


def test_add_error_string_replaces_and_is_returned() -> None:
    cls = Add_error_class()
    code = Add_error_code(cls)
    Add_error_string(cls, "my class")
    Add_error_string(code, "first")
    Add_error_string(code, "second")
    assert Get_error_string(cls) == "my class"
    assert Get_error_string(code) == "second"
    assert str(MPIException(code)) == "second"
    assert str(MPIException(code, "detail")) == "second: detail"


@pytest.mark.parametrize("code", [SUCCESS, ERR_ARG, ERR_TRUNCATE, ERR_LASTCODE])
def test_add_error_string_on_predefined_code_is_refused(code: int) -> None:
    with pytest.raises(MPIException) as info:
        Add_error_string(code, "nope")
    assert info.value.Get_error_class() == ERR_ARG
    assert Get_error_string(code) != "nope"


def test_add_error_string_on_unknown_code_is_refused() -> None:
    with pytest.raises(MPIException) as info:
        Add_error_string(last_used_code() + 1000, "x")
    assert info.value.Get_error_class() == ERR_ARG


def test_add_error_string_length_limit() -> None:
    cls = Add_error_class()
    Add_error_string(cls, "x" * _constants.MAX_ERROR_STRING)
    with pytest.raises(MPIException) as info:
        Add_error_string(cls, "x" * (_constants.MAX_ERROR_STRING + 1))
    assert info.value.Get_error_class() == ERR_ARG


def test_remove_error_code_class_and_string() -> None:
    cls = Add_error_class()
    code = Add_error_code(cls)
    Add_error_string(code, "text")
    Add_error_string(cls, "class text")
    with pytest.raises(MPIException):
        Remove_error_class(cls)  # still has a code
    with pytest.raises(MPIException):
        Remove_error_code(code)  # still has a string
    Remove_error_string(code)
    assert Get_error_string(code) == ""
    Remove_error_code(code)
    with pytest.raises(MPIException):
        Get_error_class(code)
    with pytest.raises(MPIException):
        Remove_error_class(cls)  # still has a string
    Remove_error_string(cls)
    Remove_error_class(cls)
    with pytest.raises(MPIException):
        Get_error_class(cls)
    with pytest.raises(MPIException):
        Remove_error_class(ERR_ARG)
    with pytest.raises(MPIException):
        Remove_error_code(ERR_ARG)


# --- MPI.Exception -------------------------------------------------------------------------


def test_exception_is_a_runtime_error() -> None:
    assert issubclass(MPIException, RuntimeError)
    with pytest.raises(RuntimeError):
        raise MPIException(ERR_TRUNCATE)


def test_exception_accessors() -> None:
    exc = MPIException(ERR_TRUNCATE)
    assert exc.Get_error_code() == exc.error_code == ERR_TRUNCATE
    assert exc.Get_error_class() == exc.error_class == ERR_TRUNCATE
    assert exc.Get_error_string() == exc.error_string == Get_error_string(ERR_TRUNCATE)
    assert int(exc) == ERR_TRUNCATE
    assert exc.args == (ERR_TRUNCATE,)


def test_exception_default_is_success_and_false() -> None:
    exc = MPIException()
    assert exc.error_code == SUCCESS
    assert not exc
    assert MPIException(ERR_ARG)


def test_exception_message() -> None:
    detail = "Recv: source 7 is not a rank of COMM_WORLD (size 4)"
    exc = MPIException(ERR_RANK, detail)
    assert exc.args == (ERR_RANK, detail)
    assert str(exc) == f"{Get_error_string(ERR_RANK)}: {detail}"
    assert repr(exc) == f"MPI.Exception({ERR_RANK}, {detail!r})"
    assert str(MPIException(ERR_RANK)) == Get_error_string(ERR_RANK)
    assert repr(MPIException(ERR_TRUNCATE)) == "MPI.Exception(14)"


def test_exception_comparisons_with_ints_and_exceptions() -> None:
    exc = MPIException(ERR_COUNT)
    assert exc == ERR_COUNT and operator.eq(ERR_COUNT, exc)  # reflected comparison too
    assert exc != ERR_ARG
    assert exc == MPIException(ERR_COUNT)
    assert exc != MPIException(ERR_ARG)
    assert exc < ERR_ARG and exc <= ERR_COUNT and exc > SUCCESS and exc >= ERR_COUNT
    assert MPIException(1) < MPIException(2) <= MPIException(2)
    assert MPIException(3) > MPIException(2) >= MPIException(2)
    assert exc != "2"
    with pytest.raises(TypeError):
        _ = exc < "x"  # type: ignore[operator]


def test_exception_hash_matches_code() -> None:
    assert hash(MPIException(ERR_RANK)) == hash(ERR_RANK)
    assert {MPIException(ERR_RANK), MPIException(ERR_RANK, "detail")} == {ERR_RANK}


def test_exception_has_no_index() -> None:
    with pytest.raises(TypeError):
        [0, 1, 2][MPIException(1)]  # type: ignore[index]


@pytest.mark.parametrize("args", [(), (ERR_TRUNCATE,), (ERR_RANK, "detail")])
def test_exception_pickles(args: tuple) -> None:
    exc = MPIException(*args)
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is MPIException
    assert copy.args == exc.args
    assert copy == exc
    assert str(copy) == str(exc)


def test_exception_of_a_negative_code_is_an_unknown_error() -> None:
    assert MPIException(-1) == ERR_UNKNOWN and MPIException(-7).error_code == ERR_UNKNOWN


def test_exception_with_unknown_code_still_works() -> None:
    exc = MPIException(123456)
    assert exc.Get_error_class() == ERR_UNKNOWN
    assert "123456" in exc.Get_error_string()
    assert str(exc)


# --- error handlers ------------------------------------------------------------------------


def test_predefined_handlers() -> None:
    assert ERRORS_RETURN._kind == "return"
    assert ERRORS_ARE_FATAL._kind == "fatal"
    assert ERRORS_ABORT._kind == "abort"
    assert ERRHANDLER_NULL._kind == "null"
    assert not ERRHANDLER_NULL
    assert ERRORS_RETURN and ERRORS_ARE_FATAL and ERRORS_ABORT
    handlers = [ERRHANDLER_NULL, ERRORS_RETURN, ERRORS_ARE_FATAL, ERRORS_ABORT]
    assert all((a == b) == (a is b) for a in handlers for b in handlers)
    assert repr(ERRORS_RETURN) == "MPI.ERRORS_RETURN"


def test_handle_copies_compare_equal() -> None:
    copy = Errhandler(ERRORS_RETURN)
    assert copy == ERRORS_RETURN and copy is not ERRORS_RETURN
    with pytest.raises(TypeError):
        hash(copy)  # handles are unhashable, as in mpi4py
    assert copy != ERRORS_ARE_FATAL
    assert Errhandler() == ERRHANDLER_NULL
    assert (ERRORS_RETURN == 1) is False


def test_predefined_constants_stay_when_freed() -> None:
    for handler in (ERRORS_RETURN, ERRORS_ARE_FATAL, ERRORS_ABORT):
        handler.Free()  # legal (handlers are reference counted); the constant stays
        assert handler and handler == Errhandler(handler)
    with pytest.raises(MPIException) as info:
        ERRHANDLER_NULL.Free()
    assert info.value.Get_error_class() == ERR_ERRHANDLER


def test_copy_of_predefined_handler_can_be_freed() -> None:
    copy = Errhandler(ERRORS_ARE_FATAL)  # what Get_errhandler returns
    copy.Free()
    assert copy == ERRHANDLER_NULL and not copy
    assert ERRORS_ARE_FATAL._kind == "fatal"
    with pytest.raises(MPIException):
        copy.Free()
    copy.free()  # lenient form: no error on null
    ERRORS_RETURN.free()
    assert ERRORS_RETURN


def test_user_handler() -> None:
    calls: list[tuple[object, int]] = []

    def on_error(comm: object, code: int) -> None:
        calls.append((comm, code))

    handler = Errhandler._create_user(on_error)
    assert handler._kind == "user" and handler._fn is on_error
    assert "on_error" in handler._name and "on_error" in repr(handler)
    copy = Errhandler(handler)
    assert copy == handler
    handler._fn("comm", 5)  # type: ignore[misc]
    assert calls == [("comm", 5)]
    handler.Free()
    assert handler == ERRHANDLER_NULL
    assert copy._kind == "user"  # other handles still work (freeing is per handle)


def test_user_handlers_are_limited_as_in_mpi4py() -> None:
    handlers = [Errhandler._create_user(lambda obj, code: None) for _ in range(32)]
    with pytest.raises(RuntimeError):
        Errhandler._create_user(lambda obj, code: None)
    with pytest.raises(ValueError):
        pickle.dumps(handlers[0])
    handlers[0].Free()  # its slot is free again
    handlers.append(Errhandler._create_user(lambda obj, code: None))
    for handler in handlers:
        handler.free()


def test_user_handler_must_be_callable() -> None:
    with pytest.raises(TypeError):
        Errhandler._create_user(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Errhandler("ERRORS_RETURN")  # type: ignore[arg-type]


# --- differential checks against mpi4py ----------------------------------------------------


def test_error_class_values_match_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    for name in dir(mpi):
        if name.startswith("ERR_") or name == "SUCCESS":
            assert getattr(_errors, name) == getattr(mpi, name), name


def test_mpi4py_exception_interface_is_covered() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    public = {n for n in dir(mpi.Exception) if not n.startswith("_")}
    assert public <= set(dir(MPIException))
    assert repr(mpi.Exception(14)) == repr(MPIException(14))


# Integer names of mpi4py.MPI that are address sentinels rather than constants; ipympi
# keeps them with the topology code that interprets them.
SENTINEL_INTS = {"UNWEIGHTED", "WEIGHTS_EMPTY"}
# Values that deliberately differ: the version of the standard ipympi reports.
OWN_VALUES = {"VERSION", "SUBVERSION"}


def test_constant_names_match_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    names = {n for n in dir(mpi) if type(getattr(mpi, n)) is int} - SENTINEL_INTS
    ours = set(_constants.__all__) | set(_errors.__all__)
    assert names - ours == set()
    for name in sorted(names - OWN_VALUES):
        module = _errors if name in _errors.__all__ else _constants
        assert getattr(module, name) == getattr(mpi, name), name


def test_constants_module_exports_only_ints() -> None:
    for name in _constants.__all__:
        assert type(getattr(_constants, name)) is int, name
    assert (_constants.VERSION, _constants.SUBVERSION) == (4, 1)
    assert _constants.TAG_UB_VALUE == 2**30 - 1
    assert _constants.TAG_UB_VALUE >= 32767
    assert _constants.MAX_OBJECT_NAME >= 64
    assert (_constants.ANY_SOURCE, _constants.ANY_TAG, _constants.PROC_NULL) == (-2, -1, -1)
    assert (_constants.ROOT, _constants.UNDEFINED) == (-3, -32766)
    comparisons = (_constants.IDENT, _constants.CONGRUENT, _constants.SIMILAR, _constants.UNEQUAL)
    assert comparisons == (0, 1, 2, 3)
    threads = (
        _constants.THREAD_SINGLE,
        _constants.THREAD_FUNNELED,
        _constants.THREAD_SERIALIZED,
        _constants.THREAD_MULTIPLE,
    )
    assert threads == (0, 1, 2, 3)


# -- the wrappers of MPI calls (mpi.errhandling.mpi_call, world_call) -----------------------


class _Routed:
    """An object whose calls route MPI.Exception to ``_raise``, as MPI objects do."""

    def __init__(self) -> None:
        self.routed: list[tuple[int, str]] = []

    def _raise(self, exc: Any, call: str) -> None:
        self.routed.append((exc.Get_error_class(), call))


def _shapes() -> list[Any]:
    """Functions of every shape of parameter list, each returning what it was given."""

    def plain(self, a, b=2):  # type: ignore[no-untyped-def]
        return (a, b)

    def posonly(self, a, /, b, c=3):  # type: ignore[no-untyped-def]
        return (a, b, c)

    def keywords(self, a, *, b, c=4):  # type: ignore[no-untyped-def]
        return (a, b, c)

    def varargs(self, a, *rest, key=None, **more):  # type: ignore[no-untyped-def]
        return (a, rest, key, more)

    return [plain, posonly, keywords, varargs]


@pytest.mark.parametrize("fn", _shapes(), ids=lambda f: f.__name__)
def test_a_wrapped_call_takes_the_same_parameters_as_its_function(fn: Any) -> None:
    wrapped = mpi_call(fn)
    assert inspect.signature(wrapped) == inspect.signature(fn)
    assert wrapped.__name__ == fn.__name__ and wrapped.__wrapped__ is fn
    me = _Routed()
    calls = {
        "plain": [((1,), {}), ((1, 5), {}), ((), {"a": 1, "b": 6})],
        "posonly": [((1, 2), {}), ((1,), {"b": 2, "c": 9})],
        "keywords": [((1,), {"b": 2}), ((1,), {"b": 2, "c": 8})],
        "varargs": [((1, 2, 3), {"key": 4, "x": 5}), ((1,), {})],
    }[fn.__name__]
    for args, kwargs in calls:
        assert wrapped(me, *args, **kwargs) == fn(me, *args, **kwargs)
    with pytest.raises(TypeError) as theirs:
        fn(me)
    with pytest.raises(TypeError) as ours:
        wrapped(me)
    assert str(ours.value) == str(theirs.value)  # the same complaint, under the same name


def test_a_wrapped_call_routes_mpi_exceptions_to_its_object_and_no_others() -> None:
    def fails(self, code, *, text="no"):  # type: ignore[no-untyped-def]
        if code is None:
            raise ValueError(text)
        raise MPIException(code, text)

    wrapped = mpi_call(fails)
    me = _Routed()
    assert wrapped(me, ERR_RANK) is None  # the handler returned
    assert me.routed == [(ERR_RANK, "fails")]
    with pytest.raises(ValueError, match="other"):
        wrapped(me, None, text="other")
    assert me.routed == [(ERR_RANK, "fails")]


def test_only_plain_functions_are_wrapped_as_mpi_calls() -> None:
    with pytest.raises(TypeError, match="plain function"):
        mpi_call(len)  # a builtin: its parameters cannot be read

    def no_self(*args):  # type: ignore[no-untyped-def]
        return args

    with pytest.raises(TypeError, match="self first"):
        mpi_call(no_self)
