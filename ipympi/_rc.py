"""Runtime configuration read before MPI starts, like ``mpi4py.rc``.

``ipympi.rc`` holds the options that must be decided before ``ipympi.MPI`` is first
imported: whether to initialize and finalize automatically, the thread level to request,
and what errors do by default. Each option can also be preset from the environment with
``IPYMPI_RC_<NAME>`` (e.g. ``IPYMPI_RC_THREAD_LEVEL=serialized``), which is how a launcher
configures every rank at once, or with mpi4py's ``MPI4PY_RC_<NAME>`` (the ``IPYMPI_``
variable wins where both are set). Bad names and bad values fail at once, with the option or
variable named, rather than being silently ignored. ``mpi4py.rc`` on ipympi's ranks is this
same object.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Callable

__all__ = ["Rc", "rc"]

THREAD_LEVELS = ("multiple", "serialized", "funneled", "single")
ERROR_MODES = ("exception", "default", "abort", "fatal")
ENV_PREFIXES = ("IPYMPI_RC_", "MPI4PY_RC_")  # first found wins

_TRUE = ("true", "yes", "on", "1", "y")
_FALSE = ("false", "no", "off", "0", "n")


def _check_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError(f"rc.{name} must be True or False, not {value!r}")


def _check_optional_bool(name: str, value: Any) -> bool | None:
    return None if value is None else _check_bool(name, value)


def _check_choice(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if isinstance(value, str) and value.lower() in choices:
            return value.lower()
        raise ValueError(f"rc.{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")

    return check


def _check_size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"rc.{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"rc.{name} must not be negative; got {value}")
    return value


# Option name -> (default, validator). Order is the order of repr().
_OPTIONS: dict[str, tuple[Any, Callable[[str, Any], Any]]] = {
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
    """Convert the text of ``IPYMPI_RC_<NAME>`` to a value for option ``name``."""
    default, _ = _OPTIONS[name]
    word = text.strip().lower()
    if name == "finalize" and word in ("none", ""):
        return None
    if isinstance(default, bool) or name == "finalize":
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ValueError(f"expected a boolean such as 'true' or 'false'; got {text!r}")
    if isinstance(default, int):
        try:
            return int(word)
        except ValueError:
            raise ValueError(f"expected an integer; got {text!r}") from None
    return word


class Rc:
    """Runtime configuration options.

    Options (defaults in brackets): ``initialize`` [True] start MPI when ``ipympi.MPI`` is
    imported; ``threads`` [True] request a thread level; ``thread_level`` ["multiple"]
    one of "multiple", "serialized", "funneled", "single"; ``finalize`` [None] finalize
    at exit (None: when MPI was initialized automatically); ``fast_reduce`` [True] tree
    reductions for objects; ``recv_mprobe`` [True] matched probes for object receives;
    ``irecv_bufsz`` [32768] default buffer size of ``irecv``; ``errors`` ["exception"]
    default error handler: "exception" (``ERRORS_RETURN``, errors raise
    ``MPI.Exception``), "default"/"fatal" (``ERRORS_ARE_FATAL``) or "abort"
    (``ERRORS_ABORT``).
    """

    def __init__(self, environ: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        env = os.environ if environ is None else environ
        for name, (default, _) in _OPTIONS.items():
            object.__setattr__(self, name, default)
        for name in _OPTIONS:
            variable = next((p + name.upper() for p in ENV_PREFIXES if p + name.upper() in env), "")
            if not variable:
                continue
            try:
                setattr(self, name, _parse_env(name, env[variable]))
            except (TypeError, ValueError) as exc:
                message = f"invalid value in environment variable {variable}: {exc}"
                raise ValueError(message) from None
        self(**kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        option = _OPTIONS.get(name)
        if option is None:  # TypeError, as mpi4py.rc raises
            raise TypeError(f"rc has no option {name!r}; options: {', '.join(_OPTIONS)}")
        object.__setattr__(self, name, option[1](name, value))

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
