"""Runtime configuration: defaults, names, and what MPI settles on when it is imported."""

from __future__ import annotations

import warnings

import pytest
from conftest import RunMPI

from ipympi.mpi.rc import Rc, rc, settle

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


def _settle(options: Rc, environ: dict[str, str] | None = None) -> tuple[dict, list[str]]:
    """What ``settle`` makes of ``options`` and ``environ``, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = settle(options, environ or {})
    assert all(w.category is RuntimeWarning for w in caught)
    return values, [str(w.message) for w in caught]


def test_defaults() -> None:
    fresh = Rc()
    for name, value in DEFAULTS.items():
        assert getattr(fresh, name) == value, name
    assert _settle(fresh) == (DEFAULTS, [])


def test_module_instance() -> None:
    assert isinstance(rc, Rc)


def test_call_sets_several() -> None:
    options = Rc()
    options(initialize=False, thread_level="serialized", errors="fatal", irecv_bufsz=0)
    assert options.initialize is False
    assert options.thread_level == "serialized"
    assert options.errors == "fatal"
    assert options.irecv_bufsz == 0


def test_constructor_keywords() -> None:
    assert Rc(finalize=True).finalize is True


def test_unknown_names_fail_loudly() -> None:
    options = Rc()
    with pytest.raises(TypeError, match="unexpected argument 'initialise'"):
        options(initialise=False)
    with pytest.raises(TypeError, match="no option"):
        options.initialise = False  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no option"):
        _ = options.initialise  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Rc(bogus=1)


def test_call_with_an_unknown_name_changes_nothing() -> None:
    options = Rc()
    with pytest.raises(TypeError):
        options(initialize=False, bogus=1)
    assert options.initialize is True


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("initialize", "maybe"),
        ("threads", 2),
        ("finalize", "later"),
        ("thread_level", "many"),
        ("thread_level", 3),
        ("errors", "ignore"),
        ("irecv_bufsz", -1),
        ("irecv_bufsz", 1.5),
        ("irecv_bufsz", True),
        ("fast_reduce", None),
    ],
)
def test_a_value_mpi_cannot_use_is_kept_reported_and_replaced_by_the_default(
    name: str, value: object
) -> None:
    """As with mpi4py: setting it works; importing MPI warns and uses the default."""
    options = Rc()
    setattr(options, name, value)
    assert getattr(options, name) == value
    values, messages = _settle(options)
    assert messages == [f"ipympi.rc.{name}: unexpected value {value!r}"]
    assert values == DEFAULTS
    assert getattr(options, name) == value


def test_values_are_normalised_when_settled() -> None:
    options = Rc(thread_level="FUNNELED", threads=0, finalize="yes", recv_mprobe=1.0)
    values, messages = _settle(options)
    assert messages == []
    assert values["thread_level"] == "funneled"
    assert values["threads"] is False
    assert values["finalize"] is True
    assert values["recv_mprobe"] is True


@pytest.mark.parametrize("level", ["single", "funneled", "serialized", "multiple"])
def test_every_thread_level(level: str) -> None:
    assert _settle(Rc(thread_level=level))[0]["thread_level"] == level


@pytest.mark.parametrize("mode", ["exception", "default", "abort", "fatal"])
def test_every_error_mode(mode: str) -> None:
    assert _settle(Rc(errors=mode))[0]["errors"] == mode


def test_the_environment_overrides_what_the_program_set() -> None:
    options = Rc(thread_level="single", initialize=True)
    environ = {
        "IPYMPI_RC_THREAD_LEVEL": "serialized",
        "IPYMPI_RC_ERRORS": "Fatal",
        "IPYMPI_RC_INITIALIZE": "no",
        "IPYMPI_RC_FINALIZE": "true",
        "IPYMPI_RC_IRECV_BUFSZ": "1024",
        "IPYMPI_RC_FAST_REDUCE": "0",
        "UNRELATED": "x",
    }
    values, messages = _settle(options, environ)
    assert messages == []
    expected = {"thread_level": "serialized", "errors": "fatal", "initialize": False,
                "finalize": True, "irecv_bufsz": 1024, "fast_reduce": False}  # fmt: skip
    assert values == {**DEFAULTS, **expected}
    assert {name: getattr(options, name) for name in expected} == expected


def test_environment_finalize_none() -> None:
    assert _settle(Rc(finalize=True), {"IPYMPI_RC_FINALIZE": "none"})[0]["finalize"] is None


@pytest.mark.parametrize(
    ("variable", "text"),
    [
        ("IPYMPI_RC_THREAD_LEVEL", "lots"),
        ("IPYMPI_RC_ERRORS", "quiet"),
        ("IPYMPI_RC_INITIALIZE", "maybe"),
        ("IPYMPI_RC_IRECV_BUFSZ", "big"),
        ("IPYMPI_RC_IRECV_BUFSZ", "-5"),
        ("MPI4PY_RC_FINALIZE", "2"),
    ],
)
def test_a_variable_mpi_cannot_use_is_reported_by_its_option(variable: str, text: str) -> None:
    name = variable.split("_RC_")[1].lower()
    options = Rc()
    values, messages = _settle(options, {variable: text})
    assert len(messages) == 1 and messages[0].startswith(f"ipympi.rc.{name}: unexpected value")
    assert values == DEFAULTS


def test_mpi4py_variables_are_read_and_ipympi_ones_win() -> None:
    environ = {"MPI4PY_RC_THREAD_LEVEL": "funneled", "MPI4PY_RC_ERRORS": "fatal"}
    values, _ = _settle(Rc(), environ)
    assert (values["thread_level"], values["errors"]) == ("funneled", "fatal")
    both = {"MPI4PY_RC_ERRORS": "fatal", "IPYMPI_RC_ERRORS": "abort"}
    assert _settle(Rc(), both)[0]["errors"] == "abort"


def test_repr_lists_options() -> None:
    text = repr(Rc())
    assert text.startswith("ipympi.rc(")
    for name, value in DEFAULTS.items():
        assert f"{name}={value!r}" in text


def test_options_match_mpi4py() -> None:
    mpi4py = pytest.importorskip("mpi4py")
    theirs = {n for n in dir(mpi4py.rc) if not n.startswith("_")}
    assert set(DEFAULTS) == theirs
    for name in DEFAULTS:
        assert getattr(Rc(), name) == getattr(type(mpi4py.rc)(), name), name


def test_options_round_trip_through_dict_as_mpi4py_allows() -> None:
    options = Rc(errors="fatal")
    assert options.__dict__ == {**DEFAULTS, "errors": "fatal"}
    assert Rc(**options.__dict__).errors == "fatal"


@pytest.mark.timeout(60)
def test_mpi_reads_rc_and_the_environment_when_it_is_imported(run_mpi: RunMPI) -> None:
    """Variables a program sets after importing rc count; bad values warn, by mpi4py's name."""
    source = """
        import os, warnings
        from mpi4py import rc
        os.environ["MPI4PY_RC_INITIALIZE"] = "false"
        os.environ["MPI4PY_RC_THREAD_LEVEL"] = "funneled"
        os.environ["MPI4PY_PICKLE_PROTOCOL"] = "3"
        os.environ["MPI4PY_PICKLE_THRESHOLD"] = "1024"
        rc.errors = -1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from mpi4py import MPI
        print([str(w.message) for w in caught], rc.initialize, rc.thread_level, rc.errors)
        print(MPI.Is_initialized(), MPI.pickle.PROTOCOL, MPI.pickle.THRESHOLD)
        MPI.Init()
        print(MPI.Query_thread() == MPI.THREAD_FUNNELED, MPI.COMM_WORLD.Get_errhandler() == MPI.ERRORS_RETURN)
    """  # noqa: E501
    result = run_mpi(1, source)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "['mpi4py.rc.errors: unexpected value -1'] False funneled -1",
        "False 3 1024",
        "True True",
    ]
