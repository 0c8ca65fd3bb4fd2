"""Runtime configuration: defaults, validation, environment overrides."""

from __future__ import annotations

import pytest

from ipympi._rc import Rc, rc

DEFAULTS = {
    "initialize": True,
    "threads": True,
    "thread_level": "multiple",
    "finalize": None,
    "fast_reduce": True,
    "recv_mprobe": True,
    "irecv_bufsz": 32768,
    "errors": "exception",
}


def test_defaults() -> None:
    fresh = Rc(environ={})
    for name, value in DEFAULTS.items():
        assert getattr(fresh, name) == value, name


def test_module_instance() -> None:
    assert isinstance(rc, Rc)


def test_call_sets_several() -> None:
    options = Rc(environ={})
    options(initialize=False, thread_level="serialized", errors="fatal", irecv_bufsz=0)
    assert options.initialize is False
    assert options.thread_level == "serialized"
    assert options.errors == "fatal"
    assert options.irecv_bufsz == 0


def test_constructor_keywords() -> None:
    assert Rc(environ={}, finalize=True).finalize is True


def test_unknown_names_fail_loudly() -> None:
    options = Rc(environ={})
    with pytest.raises(TypeError, match="unexpected argument 'initialise'"):
        options(initialise=False)
    with pytest.raises(TypeError, match="no option"):
        options.initialise = False  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no option"):
        _ = options.initialise  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Rc(environ={}, bogus=1)


def test_call_with_an_unknown_name_changes_nothing() -> None:
    options = Rc(environ={})
    with pytest.raises(TypeError):
        options(initialize=False, bogus=1)
    assert options.initialize is True


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("initialize", "yes", TypeError),
        ("threads", 2, TypeError),
        ("finalize", "no", TypeError),
        ("thread_level", "many", ValueError),
        ("thread_level", 3, ValueError),
        ("errors", "ignore", ValueError),
        ("irecv_bufsz", -1, ValueError),
        ("irecv_bufsz", 1.5, TypeError),
        ("irecv_bufsz", True, TypeError),
    ],
)
def test_invalid_values(name: str, value: object, error: type) -> None:
    options = Rc(environ={})
    with pytest.raises(error, match=name):
        setattr(options, name, value)
    assert getattr(options, name) == DEFAULTS[name]


def test_values_are_normalised() -> None:
    options = Rc(environ={})
    options.thread_level = "FUNNELED"
    assert options.thread_level == "funneled"
    options.threads = 0
    assert options.threads is False
    options.finalize = None
    assert options.finalize is None


@pytest.mark.parametrize("level", ["single", "funneled", "serialized", "multiple"])
def test_every_thread_level(level: str) -> None:
    assert Rc(environ={}, thread_level=level).thread_level == level


@pytest.mark.parametrize("mode", ["exception", "default", "abort", "fatal"])
def test_every_error_mode(mode: str) -> None:
    assert Rc(environ={}, errors=mode).errors == mode


def test_environment_overrides() -> None:
    options = Rc(
        environ={
            "IPYMPI_RC_THREAD_LEVEL": "serialized",
            "IPYMPI_RC_ERRORS": "Fatal",
            "IPYMPI_RC_INITIALIZE": "no",
            "IPYMPI_RC_FINALIZE": "true",
            "IPYMPI_RC_IRECV_BUFSZ": "1024",
            "IPYMPI_RC_FAST_REDUCE": "0",
            "UNRELATED": "x",
        }
    )
    assert options.thread_level == "serialized"
    assert options.errors == "fatal"
    assert options.initialize is False
    assert options.finalize is True
    assert options.irecv_bufsz == 1024
    assert options.fast_reduce is False


def test_environment_finalize_none() -> None:
    assert Rc(environ={"IPYMPI_RC_FINALIZE": "none"}).finalize is None


def test_real_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IPYMPI_RC_ERRORS", "abort")
    assert Rc().errors == "abort"


@pytest.mark.parametrize(
    ("variable", "text"),
    [
        ("IPYMPI_RC_THREAD_LEVEL", "lots"),
        ("IPYMPI_RC_ERRORS", "quiet"),
        ("IPYMPI_RC_INITIALIZE", "maybe"),
        ("IPYMPI_RC_IRECV_BUFSZ", "big"),
        ("IPYMPI_RC_IRECV_BUFSZ", "-5"),
        ("IPYMPI_RC_FINALIZE", "2"),
    ],
)
def test_invalid_environment_names_the_variable(variable: str, text: str) -> None:
    with pytest.raises(ValueError, match=variable):
        Rc(environ={variable: text})


def test_repr_lists_options() -> None:
    text = repr(Rc(environ={}))
    assert text.startswith("ipympi.rc(")
    for name, value in DEFAULTS.items():
        assert f"{name}={value!r}" in text


def test_options_match_mpi4py() -> None:
    mpi4py = pytest.importorskip("mpi4py")
    theirs = {n for n in dir(mpi4py.rc) if not n.startswith("_")}
    assert set(DEFAULTS) == theirs
    for name in DEFAULTS:
        assert getattr(Rc(environ={}), name) == getattr(type(mpi4py.rc)(), name), name


def test_mpi4py_variables_are_read_and_ipympi_ones_win() -> None:
    options = Rc(environ={"MPI4PY_RC_THREAD_LEVEL": "funneled", "MPI4PY_RC_ERRORS": "fatal"})
    assert (options.thread_level, options.errors) == ("funneled", "fatal")
    both = Rc(environ={"MPI4PY_RC_ERRORS": "fatal", "IPYMPI_RC_ERRORS": "abort"})
    assert both.errors == "abort"
    with pytest.raises(ValueError, match="MPI4PY_RC_THREADS"):
        Rc(environ={"MPI4PY_RC_THREADS": "maybe"})


def test_options_round_trip_through_dict_as_mpi4py_allows() -> None:
    options = Rc(environ={}, errors="fatal")
    assert options.__dict__ == {**DEFAULTS, "errors": "fatal"}
    assert Rc(environ={}, **options.__dict__).errors == "fatal"
