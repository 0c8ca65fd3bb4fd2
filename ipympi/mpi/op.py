"""``MPI.Op`` handles: the predefined reduction operations and user-defined ones.

An operation combines two operands, ``left op right``, where ``left`` comes from the lower
rank (MPI-3.1 §5.9.1, §5.9.5): with buffers, ``inoutvec[i] = invec[i] op inoutvec[i]``,
``invec`` being the left operand. Each operation is applied three ways:

* to typed numpy arrays, vectorised, by the buffer collectives and ``Reduce_local``
  (:meth:`Op._reduce_arrays`, after :meth:`Op._check_datatype`);
* to Python objects by the lower-case collectives (:meth:`Op._reduce_objects`), with the
  semantics of mpi4py: ``SUM`` is ``+``, ``MAX`` keeps the left operand on ties,
  ``MAXLOC``/``MINLOC`` return ``(value, index)`` tuples, ``REPLACE`` gives the right
  operand and ``NO_OP`` the left one, a user function is called as ``function(left,
  right, None)`` and its return value is the result;
* the same way by ``op(x, y)`` (:meth:`Op.__call__`);
* ``SUM``, ``PROD``, ``MAX`` and ``MIN`` also to one element of a float64 or integer
  buffer held as a Python number (``_OpImpl.reduce_scalars``), giving exactly what
  the array kernel gives: see :class:`~ipympi.core.reductions.ScalarValues`.

Each predefined operation applies to the datatype groups of §5.9.2 and §5.9.4 only (for
example ``BAND`` to integers and ``BYTE``, never to ``DOUBLE``); ``CHAR``-like types are
not numbers (§5.9.3). ``REPLACE`` and ``NO_OP`` belong to one-sided accumulate calls, so
buffer reductions reject them (``ERR_OP``, as MPICH does) and they are not commutative.
Arithmetic follows C: integers wrap around, floats are IEEE (``MAX``/``MIN`` on arrays
propagate NaN, which keeps them commutative).
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable

from ..core.errors import ERR_BUFFER, ERR_OP, ERR_TYPE
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, UserLimit, register
from ..core.lazynumpy import np
from . import datatype as _dt
from .buffers import as_ndarray, check_match, recv_buffer, send_buffer
from .datatype import Datatype, _TypeImpl
from .errhandling import world_call
from .rawmem import IN_PLACE

__all__ = [
    "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR", "MAX", "MAXLOC", "MIN", "MINLOC",
    "NO_OP", "OP_NULL", "PROD", "REPLACE", "SUM", "Op",
]  # fmt: skip

ArrayReducer = Callable[["np.ndarray", "np.ndarray", Datatype], None]
ObjectReducer = Callable[[Any, Any], Any]
UserFunction = Callable[[Any, Any, Any], Any]


# --- Datatype groups (MPI-3.1 §5.9.2, §5.9.3, §5.9.4) ------------------------------------

_C_INTEGER = "C integer"
_F_INTEGER = "Fortran integer"
_FLOATING = "floating point"
_LOGICAL = "logical"
_COMPLEX = "complex"
_BYTE = "byte"
_MULTI = "multi-language"
_PAIR = "value-index pair"
_CHARACTER = "character"

_GROUP_MEMBERS: dict[str, tuple[Datatype, ...]] = {
    _C_INTEGER: (
        _dt.INT, _dt.LONG, _dt.SHORT, _dt.UNSIGNED_SHORT, _dt.UNSIGNED, _dt.UNSIGNED_LONG,
        _dt.LONG_LONG, _dt.UNSIGNED_LONG_LONG, _dt.SIGNED_CHAR, _dt.UNSIGNED_CHAR,
        _dt.INT8_T, _dt.INT16_T, _dt.INT32_T, _dt.INT64_T,
        _dt.UINT8_T, _dt.UINT16_T, _dt.UINT32_T, _dt.UINT64_T,
    ),
    _F_INTEGER: (
        _dt.INTEGER, _dt.INTEGER1, _dt.INTEGER2, _dt.INTEGER4, _dt.INTEGER8, _dt.INTEGER16,
    ),
    _FLOATING: (
        _dt.FLOAT, _dt.DOUBLE, _dt.LONG_DOUBLE, _dt.REAL, _dt.DOUBLE_PRECISION,
        _dt.REAL2, _dt.REAL4, _dt.REAL8, _dt.REAL16, _dt.FLOAT16_T, _dt.BFLOAT16_T,
    ),
    _LOGICAL: (
        _dt.LOGICAL, _dt.C_BOOL, _dt.CXX_BOOL,
        _dt.LOGICAL1, _dt.LOGICAL2, _dt.LOGICAL4, _dt.LOGICAL8, _dt.LOGICAL16,
    ),
    _COMPLEX: (
        _dt.COMPLEX, _dt.DOUBLE_COMPLEX, _dt.C_COMPLEX, _dt.C_DOUBLE_COMPLEX,
        _dt.C_LONG_DOUBLE_COMPLEX, _dt.CXX_FLOAT_COMPLEX, _dt.CXX_DOUBLE_COMPLEX,
        _dt.CXX_LONG_DOUBLE_COMPLEX, _dt.COMPLEX4, _dt.COMPLEX8, _dt.COMPLEX16, _dt.COMPLEX32,
    ),
    _BYTE: (_dt.BYTE,),
    _MULTI: (_dt.AINT, _dt.OFFSET, _dt.COUNT),
    _PAIR: (
        _dt.SHORT_INT, _dt.INT_INT, _dt.LONG_INT, _dt.FLOAT_INT, _dt.DOUBLE_INT,
        _dt.LONG_DOUBLE_INT,
    ),
    _CHARACTER: (_dt.CHAR, _dt.WCHAR, _dt.CHARACTER),
}  # fmt: skip

# Datatype object -> its group; types in no group (PACKED, LB, UB, derived) are absent.
_GROUP_OF: dict[_TypeImpl, str] = {
    handle._impl: group for group, members in _GROUP_MEMBERS.items() for handle in members
}

_MINMAX = frozenset({_C_INTEGER, _F_INTEGER, _FLOATING, _MULTI})
_ARITHMETIC = _MINMAX | {_COMPLEX}
_LOGICAL_OPS = frozenset({_C_INTEGER, _LOGICAL})
_BITWISE = frozenset({_C_INTEGER, _F_INTEGER, _BYTE, _MULTI})
_LOC = frozenset({_PAIR})
_GROUP_ORDER = (_C_INTEGER, _F_INTEGER, _FLOATING, _LOGICAL, _COMPLEX, _BYTE, _MULTI, _PAIR)


def _describe_groups(groups: frozenset[str]) -> str:
    """Return e.g. ``'C integer, byte and multi-language types'``."""
    names = [group for group in _GROUP_ORDER if group in groups]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{listed} types"


# --- Array reducers: inoutvec = invec op inoutvec, vectorised ----------------------------


@functools.cache
def _quiet_fp_state() -> tuple[Any, Any] | None:
    """numpy 2 keeps its floating-point error state in a context variable: that variable
    and a prebuilt "ignore everything" state (setting it costs half of entering
    ``np.errstate``), or None with other numpy versions."""
    try:
        from numpy._core.umath import _extobj_contextvar, _make_extobj

        return _extobj_contextvar, _make_extobj(all="ignore")
    except (ImportError, AttributeError, TypeError):
        return None


def _ufunc_reducer(name: str) -> ArrayReducer:
    """Return a reducer applying numpy's ufunc ``name`` as ``ufunc(invec, inoutvec)`` into
    ``inoutvec`` (numpy is imported when it first runs).

    Overflow wraps (integers) or gives inf/nan (floats) silently, as in C. Logical
    ufuncs on integer arrays store 0 or 1.
    """

    def reduce(invec: np.ndarray, inoutvec: np.ndarray, datatype: Datatype) -> None:
        ufunc = getattr(np, name)
        if inoutvec.dtype.kind in "iub":  # no floating-point state to quiet
            ufunc(invec, inoutvec, out=inoutvec)
            return
        quiet = _quiet_fp_state()
        if quiet is None:
            with np.errstate(all="ignore"):
                ufunc(invec, inoutvec, out=inoutvec)
            return
        token = quiet[0].set(quiet[1])
        try:
            ufunc(invec, inoutvec, out=inoutvec)
        finally:
            quiet[0].reset(token)

    return reduce


def _loc_reducer(better_name: str) -> ArrayReducer:
    """Return the MAXLOC (``better_name="greater"``) or MINLOC (``"less"``) reducer.

    The left pair wins when its value is better, or equal with a smaller index (§5.9.4).
    """

    def reduce(invec: np.ndarray, inoutvec: np.ndarray, datatype: Datatype) -> None:
        better = getattr(np, better_name)
        names = invec.dtype.names
        if names is None or len(names) != 2:
            raise MPIException(
                ERR_TYPE, f"MAXLOC/MINLOC need (value, index) pairs, not dtype {invec.dtype}"
            )
        value, index = names
        u, v = invec[value], inoutvec[value]
        take_left = better(u, v)
        take_left |= (u == v) & (invec[index] < inoutvec[index])
        np.copyto(inoutvec, invec, where=take_left)

    return reduce


def _keep_right(invec: np.ndarray, inoutvec: np.ndarray, datatype: Datatype) -> None:
    """``REPLACE``: the result is the right operand, already in ``inoutvec``."""


def _take_left(invec: np.ndarray, inoutvec: np.ndarray, datatype: Datatype) -> None:
    """``NO_OP``: the result is the left operand."""
    np.copyto(inoutvec, invec)


def _null_arrays(invec: np.ndarray, inoutvec: np.ndarray, datatype: Datatype) -> None:
    raise _null_error()


# --- Scalar reducers: one buffer element as a Python number, as the ufunc computes it ----
# Integer results are wrapped to the element's width by the caller (ScalarValues).


def _sum_scalars(left: Any, right: Any) -> Any:
    # Not operator.add: given two NaNs it may return the other one (another sign
    # bit), and this must give exactly what np.add gives, as ranks on the array
    # path do.
    return left + right


def _prod_scalars(left: Any, right: Any) -> Any:
    return left * right


# ``left + right`` and ``left * right`` on objects, as C functions: small lower-case
# reductions call them once per round.
_sum = operator.add
_prod = operator.mul


def _max_scalars(left: Any, right: Any) -> Any:
    """``np.maximum(left, right)``: a NaN wins (the left one first), a tie gives ``right``."""
    return left if left > right or left != left else right


def _min_scalars(left: Any, right: Any) -> Any:
    """``np.minimum(left, right)``: a NaN wins (the left one first), a tie gives ``right``."""
    return left if left < right or left != left else right


# --- Object reducers: left op right, as mpi4py's lower-case reductions -------------------


def _max(left: Any, right: Any) -> Any:
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return np.maximum(left, right)  # element-wise for arrays
    return right if right > left else left


def _min(left: Any, right: Any) -> Any:
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return np.minimum(left, right)  # element-wise for arrays
    return right if right < left else left


def _land(left: Any, right: Any) -> bool:
    return bool(left) and bool(right)


def _lor(left: Any, right: Any) -> bool:
    return bool(left) or bool(right)


def _lxor(left: Any, right: Any) -> bool:
    return bool(left) != bool(right)


def _band(left: Any, right: Any) -> Any:
    return left & right


def _bor(left: Any, right: Any) -> Any:
    return left | right


def _bxor(left: Any, right: Any) -> Any:
    return left ^ right


def _maxloc(left: Any, right: Any) -> tuple[Any, Any]:
    u, i = left
    v, j = right
    if u > v:
        return (u, i)
    if v > u:
        return (v, j)
    return (v, j) if j < i else (u, i)


def _minloc(left: Any, right: Any) -> tuple[Any, Any]:
    u, i = left
    v, j = right
    if u < v:
        return (u, i)
    if v < u:
        return (v, j)
    return (v, j) if j < i else (u, i)


def _replace(left: Any, right: Any) -> Any:
    return right


def _no_op(left: Any, right: Any) -> Any:
    return left


def _null_objects(left: Any, right: Any) -> Any:
    raise _null_error()


def _null_error() -> MPIException:
    return MPIException(ERR_OP, "invalid operation: OP_NULL")


# --- The operation object and its handles ------------------------------------------------


class _OpImpl:
    """The operation that :class:`Op` handles refer to.

    ``key`` is the name of a predefined operation (``"SUM"``), ``None`` for user ones;
    ``groups`` lists the datatype groups a predefined operation applies to, ``None``
    meaning any datatype (user operations); ``function`` is the user's function;
    ``reduce_scalars`` combines two Python numbers (``SUM``, ``PROD``, ``MAX``, ``MIN``).
    """

    __slots__ = (
        "__weakref__",
        "commutative",
        "function",
        "groups",
        "key",
        "reduce_arrays",
        "reduce_objects",
        "reduce_scalars",
    )

    def __init__(
        self,
        key: str | None,
        commutative: bool,
        reduce_arrays: ArrayReducer,
        reduce_objects: ObjectReducer,
        groups: frozenset[str] | None,
        function: UserFunction | None = None,
        reduce_scalars: ObjectReducer | None = None,
    ) -> None:
        self.key = key
        self.commutative = commutative
        self.reduce_arrays = reduce_arrays
        self.reduce_objects = reduce_objects
        self.groups = groups
        self.function = function
        self.reduce_scalars = reduce_scalars


_NULL_IMPL = _OpImpl("OP_NULL", False, _null_arrays, _null_objects, frozenset())
_USER_OPS = UserLimit(32, "reduction operations")


def _user_impl(function: UserFunction, commute: bool) -> _OpImpl:
    """Build the operation object of ``Op.Create(function, commute)``."""

    def reduce_arrays(invec: np.ndarray, inoutvec: np.ndarray, datatype: Datatype) -> None:
        function(invec, inoutvec, datatype)

    def reduce_objects(left: Any, right: Any) -> Any:
        return function(left, right, None)

    return _OpImpl(None, commute, reduce_arrays, reduce_objects, None, function)


class Op(Handle):
    """A handle to a reduction operation.

    ``Op(op)`` makes a new handle to the same operation as ``op`` (equal to it);
    ``Op()`` is a null handle, equal to ``OP_NULL``.
    """

    __slots__ = ("_impl",)
    _mpi_kind = Kind("Op", 6, ERR_OP, _NULL_IMPL)
    _impl: _OpImpl

    @classmethod
    def _from_impl(cls, impl: _OpImpl) -> Op:
        handle = object.__new__(cls)
        handle._impl = impl
        return handle

    def _is_predefined(self) -> bool:
        return self._impl.key is not None

    def _live(self) -> _OpImpl:
        """Return the operation object, or raise ``ERR_OP`` for a null handle."""
        impl = self._impl
        if impl is _NULL_IMPL:
            raise _null_error()
        return impl

    # -- creation and release (§5.9.5) --------------------------------------------------
    @classmethod
    def Create(cls, function: UserFunction, commute: bool = False) -> Op:
        """Create a user-defined operation.

        ``function(invec, inoutvec, datatype)`` must set ``inoutvec[i] = invec[i] op
        inoutvec[i]`` in place; ``invec`` and ``inoutvec`` are 1-D numpy arrays of the
        datatype's numpy dtype (``uint8`` bytes when it has none) over the message data,
        so both direct numpy use and ``np.frombuffer(invec, dtype)`` work. Lower-case
        reductions call ``function(left, right, None)`` and use its return value.
        ``commute`` tells whether operands may be reordered; if false they combine in
        ascending rank order. As with mpi4py, at most 32 user-defined operations may
        exist at once (``RuntimeError``).
        """
        if not callable(function):
            raise TypeError(f"function must be callable, not {type(function).__name__}")
        impl = _user_impl(function, bool(commute))
        _USER_OPS.take(impl)
        return cls._from_impl(impl)

    @world_call
    def Free(self) -> None:
        """Release this user-defined operation's handle, which becomes ``OP_NULL``.

        Predefined operations and ``OP_NULL`` cannot be freed (``ERR_OP``).
        """
        impl = self._live()
        if impl.key is not None:
            raise MPIException(ERR_OP, f"predefined operation MPI.{impl.key} cannot be freed")
        _USER_OPS.give_back(impl)
        self._impl = _NULL_IMPL

    # -- queries (§5.9.7) ---------------------------------------------------------------
    @world_call
    def Is_commutative(self) -> bool:
        """Return whether the operation is commutative (``ERR_OP`` for ``OP_NULL``)."""
        return self._live().commutative

    @property
    def is_commutative(self) -> bool:
        """Whether the operation is commutative."""
        return self.Is_commutative()

    @property
    def is_predefined(self) -> bool:
        """Whether the operation is predefined (``OP_NULL`` included)."""
        return self._impl.key is not None

    # -- process-local reduction (§5.9.7) -----------------------------------------------
    @world_call
    def Reduce_local(self, inbuf: Any, inoutbuf: Any) -> None:
        """Set ``inoutbuf[i] = inbuf[i] op inoutbuf[i]`` element-wise.

        Both buffers (any buffer form, e.g. ``[buf, count, datatype]``) need the same
        count and datatype (``ValueError``, as in mpi4py); ``IN_PLACE`` is not allowed
        (``ERR_BUFFER``); the operation must apply to the datatype (``ERR_OP``).
        """
        impl = self._live()
        if inbuf is IN_PLACE or inoutbuf is IN_PLACE:
            raise MPIException(ERR_BUFFER, "Reduce_local does not accept MPI.IN_PLACE")
        source = send_buffer(inbuf)
        target = recv_buffer(inoutbuf)
        check_match(source, target)
        datatype = target.datatype
        self._check_datatype(datatype)
        if target.count:
            impl.reduce_arrays(as_ndarray(source), as_ndarray(target), datatype)

    # -- applying the operation to Python objects ---------------------------------------
    def __call__(self, x: Any, y: Any) -> Any:
        """Return ``x op y`` for Python objects, as the lower-case reductions do.

        ``ValueError`` for ``OP_NULL``, which has nothing to apply.
        """
        impl = self._impl
        if impl is _NULL_IMPL:
            raise ValueError("cannot call MPI.OP_NULL: it is not an operation")
        return impl.reduce_objects(x, y)

    # -- used by the collectives ----------------------------------------------------------
    @property
    def _commutative(self) -> bool:
        """Whether operands may be reordered (false for ``OP_NULL``)."""
        return self._impl.commutative

    def _check_datatype(self, datatype: Datatype) -> None:
        """Raise ``ERR_OP`` unless the operation may reduce elements of ``datatype``.

        User operations accept any datatype; predefined ones only the predefined types
        of their groups; ``REPLACE``/``NO_OP`` no datatype (they are for one-sided
        accumulate calls).
        """
        impl = self._live()
        groups = impl.groups
        if groups is None:
            return
        name = f"MPI.{impl.key}"
        if not groups:
            raise MPIException(
                ERR_OP,
                f"{name} is only valid in one-sided accumulate operations, not in reductions",
            )
        type_impl = datatype._impl
        group = _GROUP_OF.get(type_impl)
        if group in groups:
            return
        if group is None and type_impl.predefined and type_impl.parent is not None:
            group = _GROUP_OF.get(type_impl.parent)  # Create_f90_*: the sized type's group
            if group in groups:
                return
        if not datatype:
            raise MPIException(ERR_TYPE, f"{name} cannot reduce MPI.DATATYPE_NULL")
        allowed = _describe_groups(groups)
        if group is None:
            kind = "a derived datatype" if not type_impl.predefined else "in no datatype group"
            raise MPIException(
                ERR_OP,
                f"{name} is not defined for {datatype!r} ({kind}); it applies to predefined "
                f"{allowed}; use Op.Create for other datatypes",
            )
        hint = ""
        if group == _CHARACTER:
            hint = "; characters are not numbers, reduce SIGNED_CHAR or UNSIGNED_CHAR instead"
        elif group == _PAIR:
            hint = "; pairs reduce with MAXLOC or MINLOC"
        elif groups == _LOC:
            hint = " such as MPI.DOUBLE_INT"
        raise MPIException(
            ERR_OP,
            f"{name} is not defined for {datatype!r} ({group}); it applies to {allowed}{hint}",
        )

    def _reduce_arrays(self, invec: np.ndarray, inoutvec: np.ndarray, datatype: Datatype) -> None:
        """Set ``inoutvec = invec op inoutvec`` in place, ``invec`` being the left operand.

        Both are 1-D arrays of ``datatype``'s numpy dtype and the same length; call
        :meth:`_check_datatype` first. User functions get ``(invec, inoutvec, datatype)``.
        """
        self._impl.reduce_arrays(invec, inoutvec, datatype)

    def _reduce_objects(self, left: Any, right: Any) -> Any:
        """Return ``left op right`` for Python objects (``left`` from the lower rank)."""
        return self._impl.reduce_objects(left, right)

    # -- handle semantics -----------------------------------------------------------------
    def __repr__(self) -> str:
        impl = self._impl
        if impl.key is not None:
            return f"MPI.{impl.key}"
        name = getattr(impl.function, "__qualname__", None) or repr(impl.function)
        return f"<MPI.Op user-defined: {name}, commute={impl.commutative}>"

    def _reduce_created(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle a user-defined operation as ``Create(function, commute)``."""
        impl = self._impl
        return (type(self).Create, (impl.function, impl.commutative))


# --- The predefined operations -----------------------------------------------------------


def _predefined(
    key: str,
    reduce_arrays: ArrayReducer,
    reduce_objects: ObjectReducer,
    groups: frozenset[str],
    *,
    commutative: bool = True,
    reduce_scalars: ObjectReducer | None = None,
) -> Op:
    impl = _OpImpl(key, commutative, reduce_arrays, reduce_objects, groups, None, reduce_scalars)
    return Op._from_impl(impl)


OP_NULL: Op = Op._from_impl(_NULL_IMPL)

MAX = _predefined("MAX", _ufunc_reducer("maximum"), _max, _MINMAX, reduce_scalars=_max_scalars)
MIN = _predefined("MIN", _ufunc_reducer("minimum"), _min, _MINMAX, reduce_scalars=_min_scalars)
SUM = _predefined("SUM", _ufunc_reducer("add"), _sum, _ARITHMETIC, reduce_scalars=_sum_scalars)
PROD = _predefined(
    "PROD", _ufunc_reducer("multiply"), _prod, _ARITHMETIC, reduce_scalars=_prod_scalars
)
LAND = _predefined("LAND", _ufunc_reducer("logical_and"), _land, _LOGICAL_OPS)
BAND = _predefined("BAND", _ufunc_reducer("bitwise_and"), _band, _BITWISE)
LOR = _predefined("LOR", _ufunc_reducer("logical_or"), _lor, _LOGICAL_OPS)
BOR = _predefined("BOR", _ufunc_reducer("bitwise_or"), _bor, _BITWISE)
LXOR = _predefined("LXOR", _ufunc_reducer("logical_xor"), _lxor, _LOGICAL_OPS)
BXOR = _predefined("BXOR", _ufunc_reducer("bitwise_xor"), _bxor, _BITWISE)
MAXLOC = _predefined("MAXLOC", _loc_reducer("greater"), _maxloc, _LOC)
MINLOC = _predefined("MINLOC", _loc_reducer("less"), _minloc, _LOC)
REPLACE = _predefined("REPLACE", _keep_right, _replace, frozenset(), commutative=False)
NO_OP = _predefined("NO_OP", _take_left, _no_op, frozenset(), commutative=False)
register(globals(), __all__)  # the module's constants (see core.handle)
