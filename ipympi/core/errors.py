"""Error classes, error codes and ``MPI.Exception``: how every layer reports a failure.

MPI reports failures as integer *error codes*; each code belongs to an *error class*, and
every predefined class is also a valid code (MPI-3.0 §2.4). Python code sees them as
:class:`Exception` instances carrying the code, as with mpi4py.

This module owns:

* the predefined error classes (``SUCCESS``, ``ERR_*``) with the values mpi4py reports on
  MPICH, and a one-sentence description of each;
* the process-local registry of user-defined classes, codes and strings
  (``Add_error_class``/``Add_error_code``/``Add_error_string``, MPI-3.0 §2.5);
* :class:`Exception`, exported as ``MPI.Exception``.

Error handlers, the handles that decide what happens when an error occurs on an object
(raise, abort, call a user function), are MPI objects: see ``mpi.errhandling``.
"""

from __future__ import annotations

import operator
import threading
from typing import Any

from .constants import MAX_ERROR_STRING

__all__ = [
    "ERR_ABI",
    "ERR_ACCESS", "ERR_AMODE", "ERR_ARG", "ERR_ASSERT", "ERR_BAD_FILE", "ERR_BASE",
    "ERR_BUFFER", "ERR_COMM", "ERR_CONVERSION", "ERR_COUNT", "ERR_DIMS", "ERR_DISP",
    "ERR_DUP_DATAREP", "ERR_ERRHANDLER", "ERR_FILE", "ERR_FILE_EXISTS", "ERR_FILE_IN_USE",
    "ERR_GROUP", "ERR_INFO", "ERR_INFO_KEY", "ERR_INFO_NOKEY", "ERR_INFO_VALUE", "ERR_INTERN",
    "ERR_IN_STATUS", "ERR_IO", "ERR_KEYVAL", "ERR_LASTCODE", "ERR_LOCKTYPE", "ERR_NAME",
    "ERR_NOT_SAME", "ERR_NO_MEM", "ERR_NO_SPACE", "ERR_NO_SUCH_FILE", "ERR_OP", "ERR_OTHER",
    "ERR_PENDING", "ERR_PORT", "ERR_PROC_ABORTED", "ERR_PROC_FAILED",
    "ERR_PROC_FAILED_PENDING", "ERR_QUOTA", "ERR_RANK", "ERR_READ_ONLY", "ERR_REQUEST",
    "ERR_REVOKED", "ERR_RMA_ATTACH", "ERR_RMA_CONFLICT", "ERR_RMA_FLAVOR", "ERR_RMA_RANGE",
    "ERR_RMA_SHARED", "ERR_RMA_SYNC", "ERR_ROOT", "ERR_SERVICE", "ERR_SESSION", "ERR_SIZE",
    "ERR_SPAWN", "ERR_TAG", "ERR_TOPOLOGY", "ERR_TRUNCATE", "ERR_TYPE", "ERR_UNKNOWN",
    "ERR_UNSUPPORTED_DATAREP", "ERR_UNSUPPORTED_OPERATION", "ERR_VALUE_TOO_LARGE", "ERR_WIN",
    "SUCCESS", "Add_error_class", "Add_error_code", "Add_error_string", "Exception",
    "Get_error_class", "Get_error_string", "Remove_error_class",
    "Remove_error_code", "Remove_error_string", ]  # fmt: skip

# --- Predefined error classes (MPI-1 set) ------------------------------------------------
SUCCESS: int = 0
ERR_BUFFER: int = 1
ERR_COUNT: int = 2
ERR_TYPE: int = 3
ERR_TAG: int = 4
ERR_COMM: int = 5
ERR_RANK: int = 6
ERR_ROOT: int = 7
ERR_GROUP: int = 8
ERR_OP: int = 9
ERR_TOPOLOGY: int = 10
ERR_DIMS: int = 11
ERR_ARG: int = 12
ERR_UNKNOWN: int = 13
ERR_TRUNCATE: int = 14
ERR_OTHER: int = 15
ERR_INTERN: int = 16
ERR_IN_STATUS: int = 17
ERR_PENDING: int = 18
ERR_REQUEST: int = 19

# --- Parallel I/O ------------------------------------------------------------------------
ERR_ACCESS: int = 20
ERR_AMODE: int = 21
ERR_BAD_FILE: int = 22
ERR_CONVERSION: int = 23
ERR_DUP_DATAREP: int = 24
ERR_FILE_EXISTS: int = 25
ERR_FILE_IN_USE: int = 26
ERR_FILE: int = 27

# --- Info objects ------------------------------------------------------------------------
ERR_INFO: int = 28
ERR_INFO_KEY: int = 29
ERR_INFO_VALUE: int = 30
ERR_INFO_NOKEY: int = 31

# --- More I/O, names, memory, collectives, dynamic processes -----------------------------
ERR_IO: int = 32
ERR_NAME: int = 33
ERR_NO_MEM: int = 34
ERR_NOT_SAME: int = 35
ERR_NO_SPACE: int = 36
ERR_NO_SUCH_FILE: int = 37
ERR_PORT: int = 38
ERR_QUOTA: int = 39
ERR_READ_ONLY: int = 40
ERR_SERVICE: int = 41
ERR_SPAWN: int = 42
ERR_UNSUPPORTED_DATAREP: int = 43
ERR_UNSUPPORTED_OPERATION: int = 44

# --- One-sided communication, memory, caching --------------------------------------------
ERR_WIN: int = 45
ERR_BASE: int = 46
ERR_LOCKTYPE: int = 47
ERR_KEYVAL: int = 48
ERR_RMA_CONFLICT: int = 49
ERR_RMA_SYNC: int = 50
ERR_SIZE: int = 51
ERR_DISP: int = 52
ERR_ASSERT: int = 53
ERR_RMA_RANGE: int = 55
ERR_RMA_ATTACH: int = 56
ERR_RMA_SHARED: int = 57
ERR_RMA_FLAVOR: int = 58

# --- MPI-4 additions ---------------------------------------------------------------------
ERR_SESSION: int = 75
ERR_PROC_ABORTED: int = 76
ERR_VALUE_TOO_LARGE: int = 77
ERR_ERRHANDLER: int = 80

# --- Upper bound of the predefined codes; user classes and codes are numbered above it ---
ERR_LASTCODE: int = 1073741823

# --- Classes of features this implementation lacks: aliases, as mpi4py shows on MPICH ----
ERR_PROC_FAILED: int = ERR_UNKNOWN  # fault tolerance (ULFM)
ERR_PROC_FAILED_PENDING: int = ERR_UNKNOWN
ERR_REVOKED: int = ERR_UNKNOWN
ERR_ABI: int = ERR_LASTCODE  # standard ABI

# One sentence per predefined class, returned by Get_error_string.
_ERROR_STRINGS: dict[int, str] = {
    SUCCESS: "No error",
    ERR_BUFFER: "Invalid buffer",
    ERR_COUNT: "Invalid count argument",
    ERR_TYPE: "Invalid datatype argument",
    ERR_TAG: "Invalid tag argument",
    ERR_COMM: "Invalid communicator",
    ERR_RANK: "Invalid rank",
    ERR_ROOT: "Invalid root rank",
    ERR_GROUP: "Invalid group",
    ERR_OP: "Invalid reduction operation",
    ERR_TOPOLOGY: "Invalid topology or communicator without the required topology",
    ERR_DIMS: "Invalid dimension argument",
    ERR_ARG: "Invalid argument of some other kind",
    ERR_UNKNOWN: "Unknown error",
    ERR_TRUNCATE: "Message truncated: the receive buffer is too small for the message",
    ERR_OTHER: "Other error; see the accompanying message",
    ERR_INTERN: "Internal error in the MPI implementation",
    ERR_IN_STATUS: "Error code is in the status of a request",
    ERR_PENDING: "Request is still pending",
    ERR_REQUEST: "Invalid request",
    ERR_ACCESS: "Permission denied for the file",
    ERR_AMODE: "Invalid file access mode",
    ERR_BAD_FILE: "Invalid file name",
    ERR_CONVERSION: "Data conversion failed in a user conversion function",
    ERR_DUP_DATAREP: "Data representation already registered",
    ERR_FILE_EXISTS: "File already exists",
    ERR_FILE_IN_USE: "File is in use by some process",
    ERR_FILE: "Invalid file handle",
    ERR_INFO: "Invalid info object",
    ERR_INFO_KEY: "Info key is too long or otherwise invalid",
    ERR_INFO_VALUE: "Info value is too long or otherwise invalid",
    ERR_INFO_NOKEY: "Info key is not defined",
    ERR_IO: "Input/output error",
    ERR_NAME: "Service name is not published",
    ERR_NO_MEM: "Out of memory for the requested allocation",
    ERR_NOT_SAME: "Collective argument differs between processes, or collectives "
    "were called in a different order",
    ERR_NO_SPACE: "No space left on the device",
    ERR_NO_SUCH_FILE: "File does not exist",
    ERR_PORT: "Invalid port name",
    ERR_QUOTA: "Storage quota exceeded",
    ERR_READ_ONLY: "File or file system is read-only",
    ERR_SERVICE: "Service name could not be unpublished",
    ERR_SPAWN: "Processes could not be spawned",
    ERR_UNSUPPORTED_DATAREP: "Unsupported data representation",
    ERR_UNSUPPORTED_OPERATION: "Operation not supported on this file",
    ERR_WIN: "Invalid window",
    ERR_BASE: "Invalid base address: memory not obtained from Alloc_mem",
    ERR_LOCKTYPE: "Invalid lock type",
    ERR_KEYVAL: "Invalid attribute key",
    ERR_RMA_CONFLICT: "Conflicting accesses to a window",
    ERR_RMA_SYNC: "Wrong synchronization of one-sided operations",
    ERR_SIZE: "Invalid size argument",
    ERR_DISP: "Invalid displacement argument",
    ERR_ASSERT: "Invalid assertion argument",
    ERR_RMA_RANGE: "Target memory is outside the window",
    ERR_RMA_ATTACH: "Memory cannot be attached to the window",
    ERR_RMA_SHARED: "Memory cannot be shared through the window",
    ERR_RMA_FLAVOR: "Window is of the wrong flavor for this operation",
    ERR_SESSION: "Invalid session",
    ERR_PROC_ABORTED: "Operation involves a process that has aborted",
    ERR_VALUE_TOO_LARGE: "Value is too large to be stored in the output argument",
    ERR_ERRHANDLER: "Invalid error handler",
    ERR_LASTCODE: "Last predefined error code",
}


# --- Registry of user-defined classes, codes and strings (process-local) -----------------
_registry_lock = threading.Lock()
_user_classes: set[int] = set()
_user_codes: dict[int, int] = {}  # code -> its class
_user_strings: dict[int, str] = {}
_last_used: int = ERR_LASTCODE


def _as_code(errorcode: Any) -> int:
    """Return ``errorcode`` as an int; refuse non-integers with ``TypeError``."""
    return operator.index(errorcode)


def _class_of(code: int) -> int | None:
    """Return the class of a valid code, or ``None`` when the code is not valid."""
    if code in _ERROR_STRINGS or code in _user_classes:
        return code
    return _user_codes.get(code)


def _invalid_code(code: int) -> Exception:
    return Exception(ERR_ARG, f"{code} is not a valid error code or error class")


def last_used_code() -> int:
    """Return the value of the ``LASTUSEDCODE`` attribute of ``COMM_WORLD``.

    It is the largest error class or code in use; it starts at ``ERR_LASTCODE`` and grows
    with every ``Add_error_class``/``Add_error_code`` call on this process.
    """
    return _last_used


def Get_error_class(errorcode: int) -> int:
    """Return the error class of ``errorcode``; a class maps to itself.

    Raises ``Exception(ERR_ARG)`` when ``errorcode`` is neither predefined nor added.
    """
    code = _as_code(errorcode)
    errorclass = _class_of(code)
    if errorclass is None:
        raise _invalid_code(code)
    return errorclass


def Get_error_string(errorcode: int) -> str:
    """Return the text describing an error class or code.

    User classes and codes without an added string give ``""``. Raises
    ``Exception(ERR_ARG)`` for an invalid code.
    """
    code = _as_code(errorcode)
    text = _ERROR_STRINGS.get(code)
    if text is not None:
        return text
    if _class_of(code) is None:
        raise _invalid_code(code)
    return _user_strings.get(code, "")


def Add_error_class() -> int:
    """Create a new error class above ``ERR_LASTCODE`` and return it.

    ``ERR_LASTCODE`` does not change; ``LASTUSEDCODE`` becomes the new value.
    """
    global _last_used
    with _registry_lock:
        _last_used += 1
        _user_classes.add(_last_used)
        return _last_used


def Add_error_code(errorclass: int) -> int:
    """Create a new error code in ``errorclass`` (predefined or user) and return it.

    Raises ``Exception(ERR_ARG)`` when ``errorclass`` is not an error class, or is
    ``SUCCESS`` (a code in that class would be an error that means "no error").
    """
    global _last_used
    cls = _as_code(errorclass)
    with _registry_lock:
        if cls == SUCCESS or not (cls in _ERROR_STRINGS or cls in _user_classes):
            raise Exception(ERR_ARG, f"{cls} is not an error class that codes can be added to")
        _last_used += 1
        _user_codes[_last_used] = cls
        return _last_used


def Add_error_string(errorcode: int, string: str) -> None:
    """Set the text of a user error class or code; a second call replaces it.

    Raises ``Exception(ERR_ARG)`` for predefined codes (``<= ERR_LASTCODE``), codes that
    were never added, and strings longer than ``MAX_ERROR_STRING`` characters.
    """
    code = _as_code(errorcode)
    if not isinstance(string, str):
        raise TypeError(f"error string must be a str, not {type(string).__name__}")
    if code <= ERR_LASTCODE:
        raise Exception(ERR_ARG, f"the string of predefined error code {code} cannot be changed")
    if len(string) > MAX_ERROR_STRING:
        raise Exception(
            ERR_ARG, f"error string has {len(string)} characters; at most {MAX_ERROR_STRING}"
        )
    with _registry_lock:
        if _class_of(code) is None:
            raise _invalid_code(code)
        _user_strings[code] = string


def _still_has_string(code: int, what: str) -> Exception:
    return Exception(
        ERR_ARG, f"{what} {code} still has an error string; call Remove_error_string first"
    )


def Remove_error_class(errorclass: int) -> None:
    """Remove a user error class that has neither codes nor a string any more (MPI-4.1 §9.5).

    Raises ``Exception(ERR_ARG)`` for predefined or unknown classes and for classes that
    still have codes or a string.
    """
    cls = _as_code(errorclass)
    with _registry_lock:
        if cls not in _user_classes:
            raise Exception(ERR_ARG, f"{cls} is not a user-defined error class")
        if cls in _user_codes.values():
            raise Exception(ERR_ARG, f"error class {cls} still has error codes")
        if cls in _user_strings:
            raise _still_has_string(cls, "error class")
        _user_classes.discard(cls)


def Remove_error_code(errorcode: int) -> None:
    """Remove a user error code (not a class) that has no string any more.

    Raises ``Exception(ERR_ARG)`` for anything else.
    """
    code = _as_code(errorcode)
    with _registry_lock:
        if code not in _user_codes:
            raise Exception(ERR_ARG, f"{code} is not a user-defined error code")
        if code in _user_strings:
            raise _still_has_string(code, "error code")
        del _user_codes[code]


def Remove_error_string(errorcode: int) -> None:
    """Remove the text of a user error class or code, so it reads ``""`` again."""
    code = _as_code(errorcode)
    with _registry_lock:
        if code <= ERR_LASTCODE or _class_of(code) is None:
            raise Exception(ERR_ARG, f"{code} is not a user-defined error class or code")
        _user_strings.pop(code, None)


class Exception(RuntimeError):  # exported as MPI.Exception, as in mpi4py
    """An MPI error, carrying its error code and an optional detail message.

    ``ierr`` is the error code (a class, or a code added by ``Add_error_code``; a
    negative value becomes ``ERR_UNKNOWN``);
    ``message`` says what exactly went wrong, e.g. which argument was invalid. The object
    behaves like its code in comparisons, ``int()`` and hashing, so ``e == MPI.ERR_RANK``
    and ``e.Get_error_class() == MPI.ERR_RANK`` both work.
    """

    def __init__(self, ierr: int = SUCCESS, message: str | None = None) -> None:
        code = operator.index(ierr)
        if code < SUCCESS:  # not an error code at all: as mpi4py, an unknown error
            code = ERR_UNKNOWN
        if message is None:
            super().__init__(code)
        else:
            super().__init__(code, message)
        self._code = code
        self._message = message

    # -- accessors ----------------------------------------------------------------------
    def Get_error_code(self) -> int:
        """Return the error code."""
        return self._code

    def Get_error_class(self) -> int:
        """Return the class of the error code (``ERR_UNKNOWN`` if the code is unknown)."""
        errorclass = _class_of(self._code)
        return ERR_UNKNOWN if errorclass is None else errorclass

    def Get_error_string(self) -> str:
        """Return the standard text of the error code (without the detail message)."""
        code = self._code
        text = _ERROR_STRINGS.get(code)
        if text is not None:
            return text
        if _class_of(code) is None:
            return f"Unknown error code {code}"
        return _user_strings.get(code, "")

    @property
    def error_code(self) -> int:
        """The error code."""
        return self._code

    @property
    def error_class(self) -> int:
        """The error class."""
        return self.Get_error_class()

    @property
    def error_string(self) -> str:
        """The standard text of the error code."""
        return self.Get_error_string()

    # -- behaves like its code ----------------------------------------------------------
    def __int__(self) -> int:
        return self._code

    def __bool__(self) -> bool:
        return self._code != SUCCESS

    def __hash__(self) -> int:
        return hash(self._code)

    @staticmethod
    def _other_code(other: object) -> int | None:
        if isinstance(other, Exception):
            return other._code
        if isinstance(other, int):
            return other
        return None

    def __eq__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code == code

    def __ne__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code != code

    def __lt__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code < code

    def __le__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code <= code

    def __gt__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code > code

    def __ge__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code >= code

    # -- text ---------------------------------------------------------------------------
    def __repr__(self) -> str:
        if self._message is None:
            return f"MPI.Exception({self._code})"
        return f"MPI.Exception({self._code}, {self._message!r})"

    def __str__(self) -> str:
        text = self.Get_error_string() or f"Error code {self._code}"
        if self._message:
            return f"{text}: {self._message}"
        return text
