"""Runtime configuration read when MPI starts, like ``mpi4py.rc``.

``ipympi.rc`` holds the options that must be decided before ``ipympi.MPI`` is first
imported: whether to initialize and finalize automatically, the thread level to request,
and what errors do by default. ``mpi4py.rc`` on ipympi's ranks is this same object, and
it behaves as mpi4py's does:

* a name that is not an option fails at once (``TypeError``), but any value may be set;
* importing ``ipympi.MPI`` settles the options (:func:`settle`): each one set in the
  environment with ``IPYMPI_RC_<NAME>`` (how a launcher configures every rank at once) or
  mpi4py's ``MPI4PY_RC_<NAME>`` (the ``IPYMPI_`` variable wins where both are set)
  replaces what the program set, and a value MPI cannot use is reported with a
  ``RuntimeWarning`` naming the option (``mpi4py.rc.errors: unexpected value 7``), MPI
  then using the option's default. What MPI settled on is :func:`setting`'s answer.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any, Callable

__all__ = ["Rc", "rc", "reset", "setting", "settle"]

THREAD_LEVELS = ("multiple", "serialized", "funneled", "single")
ERROR_MODES = ("exception", "default", "abort", "fatal")
ENV_PREFIXES = ("IPYMPI_RC_", "MPI4PY_RC_")  # first found wins

_TRUE = ("true", "yes", "on", "1", "y")
_FALSE = ("false", "no", "off", "0", "n")


class _Invalid(Exception):
    """A value an option cannot take."""


def _check_bool(value: Any) -> bool:
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    if not isinstance(value, str) and value in (True, False):
        return bool(value)
    raise _Invalid


def _check_optional_bool(value: Any) -> bool | None:
    return None if value is None else _check_bool(value)


def _check_choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if isinstance(value, str) and value.lower() in choices:
            return value.lower()
        raise _Invalid

    return check


def _check_size(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise _Invalid


# Option name -> (default, check: the value MPI uses, or _Invalid). Order is repr()'s.
_OPTIONS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "initialize": (True, _check_bool),
    "threads": (True, _check_bool),
    "thread_level": ("multiple", _check_choice(THREAD_LEVELS)),
    "finalize": (None, _check_optional_bool),
    "fast_reduce": (True, _check_bool),
    "recv_mprobe": (True, _check_bool),
    "irecv_bufsz": (32768, _check_size),
    "errors": ("exception", _check_choice(ERROR_MODES)),
}


def _parse_env(name: str, text: str) -> Any:
    """The value of option ``name`` that the text of its environment variable gives.

    Booleans from words such as "true", "no", "off" (any case; "none" too for
    ``finalize``), integers from digits, names in lower case; text that does not parse
    is returned as it is, for :func:`settle` to report.
    """
    default, _ = _OPTIONS[name]
    word = text.strip().lower()
    if name == "finalize" and word == "none":
        return None
    if isinstance(default, bool) or name == "finalize":
        return word in _TRUE if word in _TRUE + _FALSE else text
    if isinstance(default, int):
        try:
            return int(word)
        except ValueError:
            return text
    return word


class Rc:
    """Runtime configuration options.

    Options (defaults in brackets): ``initialize`` [True] start MPI when ``ipympi.MPI`` is
    imported; ``threads`` [True] request a thread level (else ``THREAD_SINGLE``);
    ``thread_level`` ["multiple"] one of "multiple", "serialized", "funneled", "single";
    ``finalize`` [None] finalize at exit (None: when MPI was initialized automatically);
    ``fast_reduce`` [True] tree reductions for objects; ``recv_mprobe`` [True] matched
    probes for object receives; ``irecv_bufsz`` [32768] default buffer size of ``irecv``;
    ``errors`` ["exception"] default error handler: "exception" (``ERRORS_RETURN``,
    errors raise ``MPI.Exception``), "default"/"fatal" (``ERRORS_ARE_FATAL``) or "abort"
    (``ERRORS_ABORT``). Values are checked when ``ipympi.MPI`` is imported.
    """

    def __init__(self, **kwargs: Any) -> None:
        for name, (default, _) in _OPTIONS.items():
            object.__setattr__(self, name, default)
        self(**kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _OPTIONS:  # TypeError, as mpi4py.rc raises
            raise TypeError(f"rc has no option {name!r}; options: {', '.join(_OPTIONS)}")
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:  # only for names that are not options
        raise AttributeError(f"rc has no option {name!r}; options: {', '.join(_OPTIONS)}")

    def __call__(self, **kwargs: Any) -> None:
        """Set several options at once: ``rc(initialize=False, errors="fatal")``."""
        for name in kwargs:
            if name not in _OPTIONS:
                raise TypeError(f"unexpected argument {name!r}; options: {', '.join(_OPTIONS)}")
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        items = ", ".join(f"{name}={getattr(self, name)!r}" for name in _OPTIONS)
        return f"ipympi.rc({items})"


rc = Rc()

_settled: dict[str, Any] = {}


def settle(options: Rc | None = None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Fix the options MPI runs with, as mpi4py does when its ``MPI`` is imported.

    Each option set in ``environ`` (default ``os.environ``) is first stored in
    ``options`` (default :data:`rc`); then every value is checked, a ``RuntimeWarning``
    reports each one MPI cannot use, and the option's default stands in for it. Returns
    the values MPI uses; for :data:`rc`, :func:`setting` answers them from then on.
    """
    options = rc if options is None else options
    env = os.environ if environ is None else environ
    for name in _OPTIONS:
        variable = next((p + name.upper() for p in ENV_PREFIXES if p + name.upper() in env), "")
        if variable:
            setattr(options, name, _parse_env(name, env[variable]))
    # On a rank where the program imported ``mpi4py``, rc is known by that name.
    owner = "mpi4py" if sys.modules.get("mpi4py.rc") is options else "ipympi"
    values = {}
    for name, (default, check) in _OPTIONS.items():
        value = getattr(options, name)
        try:
            values[name] = check(value)
        except _Invalid:
            message = f"{owner}.rc.{name}: unexpected value {value!r}"
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            values[name] = default
    if options is rc:
        _settled.update(values)
    return values


def setting(name: str) -> Any:
    """The value MPI uses for option ``name``: as settled when ``ipympi.MPI`` was imported."""
    if not _settled:
        settle()
    return _settled[name]


def reset() -> None:
    """Put every option of :data:`rc` back to its default and forget what was settled:
    for a rank forked from a process that imported ``ipympi.MPI`` before it."""
    Rc.__init__(rc)
    _settled.clear()
