"""Integer constants of the ``MPI`` module.

These are the scalar, compile-time constants of the MPI standard that mpi4py exposes as
plain ``int`` attributes of ``mpi4py.MPI``. Programs compare against them, pass them as
arguments and sometimes print them, so the values follow what mpi4py reports on MPICH:
code written against mpi4py that hard-codes a value (or a test that compares values
across implementations) then behaves the same.

Error classes live in :mod:`ipympi.core.errors`; sentinel objects (``BOTTOM``, ``IN_PLACE``,
``UNWEIGHTED``, ...) are not integers in this implementation and live with the code that
interprets them.
"""

from __future__ import annotations

__all__ = [
    "ANY_SOURCE",
    "ANY_TAG",
    "APPNUM",
    "BSEND_OVERHEAD",
    "CART",
    "COMBINER_CONTIGUOUS",
    "COMBINER_DARRAY",
    "COMBINER_DUP",
    "COMBINER_F90_COMPLEX",
    "COMBINER_F90_INTEGER",
    "COMBINER_F90_REAL",
    "COMBINER_HINDEXED",
    "COMBINER_HINDEXED_BLOCK",
    "COMBINER_HVECTOR",
    "COMBINER_INDEXED",
    "COMBINER_INDEXED_BLOCK",
    "COMBINER_NAMED",
    "COMBINER_RESIZED",
    "COMBINER_STRUCT",
    "COMBINER_SUBARRAY",
    "COMBINER_VALUE_INDEX",
    "COMBINER_VECTOR",
    "COMM_TYPE_HW_GUIDED",
    "COMM_TYPE_HW_UNGUIDED",
    "COMM_TYPE_RESOURCE_GUIDED",
    "COMM_TYPE_SHARED",
    "CONGRUENT",
    "DISPLACEMENT_CURRENT",
    "DISP_CUR",
    "DISTRIBUTE_BLOCK",
    "DISTRIBUTE_CYCLIC",
    "DISTRIBUTE_DFLT_DARG",
    "DISTRIBUTE_NONE",
    "DIST_GRAPH",
    "F_ERROR",
    "F_SOURCE",
    "F_STATUS_SIZE",
    "F_TAG",
    "GRAPH",
    "HOST",
    "IDENT",
    "IO",
    "KEYVAL_INVALID",
    "LASTUSEDCODE",
    "LOCK_EXCLUSIVE",
    "LOCK_SHARED",
    "MAX_DATAREP_STRING",
    "MAX_ERROR_STRING",
    "MAX_INFO_KEY",
    "MAX_INFO_VAL",
    "MAX_LIBRARY_VERSION_STRING",
    "MAX_OBJECT_NAME",
    "MAX_PORT_NAME",
    "MAX_PROCESSOR_NAME",
    "MAX_PSET_NAME_LEN",
    "MAX_STRINGTAG_LEN",
    "MODE_APPEND",
    "MODE_CREATE",
    "MODE_DELETE_ON_CLOSE",
    "MODE_EXCL",
    "MODE_NOCHECK",
    "MODE_NOPRECEDE",
    "MODE_NOPUT",
    "MODE_NOSTORE",
    "MODE_NOSUCCEED",
    "MODE_RDONLY",
    "MODE_RDWR",
    "MODE_SEQUENTIAL",
    "MODE_UNIQUE_OPEN",
    "MODE_WRONLY",
    "ORDER_C",
    "ORDER_F",
    "ORDER_FORTRAN",
    "PROC_NULL",
    "ROOT",
    "SEEK_CUR",
    "SEEK_END",
    "SEEK_SET",
    "SIMILAR",
    "SUBVERSION",
    "TAG_UB",
    "THREAD_FUNNELED",
    "THREAD_MULTIPLE",
    "THREAD_SERIALIZED",
    "THREAD_SINGLE",
    "TYPECLASS_COMPLEX",
    "TYPECLASS_INTEGER",
    "TYPECLASS_LOGICAL",
    "TYPECLASS_REAL",
    "UNDEFINED",
    "UNEQUAL",
    "UNIVERSE_SIZE",
    "VERSION",
    "WIN_BASE",
    "WIN_CREATE_FLAVOR",
    "WIN_DISP_UNIT",
    "WIN_FLAVOR",
    "WIN_FLAVOR_ALLOCATE",
    "WIN_FLAVOR_CREATE",
    "WIN_FLAVOR_DYNAMIC",
    "WIN_FLAVOR_SHARED",
    "WIN_MODEL",
    "WIN_SEPARATE",
    "WIN_SIZE",
    "WIN_UNIFIED",
    "WTIME_IS_GLOBAL",
]

# --- Version of the standard this implementation reports (Get_version) ------------------
# The MPI 4.1 interface of the chapters ipympi implements (mpi4py 4.1's API); the features
# it leaves out (one-sided communication, I/O, spawning processes, ...) raise
# NotImplementedError when used.
VERSION: int = 4
SUBVERSION: int = 1

# --- Point-to-point: wildcards and special ranks ---------------------------------------
ANY_SOURCE: int = -2  # receive from any sender
ANY_TAG: int = -1  # receive with any tag
PROC_NULL: int = -1  # the null process: communication with it completes at once
ROOT: int = -3  # intercommunicator collectives: "I am the root"
UNDEFINED: int = -32766  # "no value", e.g. Get_count of a partial element, Split colour
BSEND_OVERHEAD: int = 96  # bytes of per-message overhead a Bsend buffer must allow for

# --- Largest tag value (the value of the TAG_UB attribute, not an MPI name) -------------
TAG_UB_VALUE: int = 2**30 - 1

# --- Groups and communicators: comparison results ---------------------------------------
IDENT: int = 0  # the same object
CONGRUENT: int = 1  # same group, same order, different context
SIMILAR: int = 2  # same members, different order
UNEQUAL: int = 3  # anything else

# --- Caching: invalid key value ---------------------------------------------------------
KEYVAL_INVALID: int = 603979776

# --- Predefined attribute keys on COMM_WORLD (environmental inquiry) --------------------
TAG_UB: int = 1681915905  # largest usable tag
HOST: int = 1681915907  # rank of the host process, or PROC_NULL
IO: int = 1681915909  # a rank that can do language I/O
WTIME_IS_GLOBAL: int = 1681915911  # 1 when clocks are synchronised
UNIVERSE_SIZE: int = 1681915913  # processes available to the job
LASTUSEDCODE: int = 1681915915  # largest error code or class in use
APPNUM: int = 1681915917  # which executable of an MPMD launch

# --- Predefined attribute keys on windows (one-sided communication) ---------------------
WIN_BASE: int = 1711276033
WIN_SIZE: int = 1711276035
WIN_DISP_UNIT: int = 1711276037
WIN_CREATE_FLAVOR: int = 1711276039
WIN_FLAVOR: int = WIN_CREATE_FLAVOR
WIN_MODEL: int = 1711276041

# Window flavours and memory models (values of WIN_CREATE_FLAVOR / WIN_MODEL).
WIN_FLAVOR_CREATE: int = 1
WIN_FLAVOR_ALLOCATE: int = 2
WIN_FLAVOR_DYNAMIC: int = 3
WIN_FLAVOR_SHARED: int = 4
WIN_SEPARATE: int = 1
WIN_UNIFIED: int = 2

# --- Lengths of strings returned by MPI --------------------------------------------------
MAX_PROCESSOR_NAME: int = 128
MAX_LIBRARY_VERSION_STRING: int = 8192
MAX_ERROR_STRING: int = 512
MAX_DATAREP_STRING: int = 128
MAX_INFO_KEY: int = 255
MAX_INFO_VAL: int = 1024
MAX_OBJECT_NAME: int = 128
MAX_PORT_NAME: int = 1024
MAX_PSET_NAME_LEN: int = 256
MAX_STRINGTAG_LEN: int = 256

# --- Threads: levels of thread support ---------------------------------------------------
THREAD_SINGLE: int = 0
THREAD_FUNNELED: int = 1
THREAD_SERIALIZED: int = 2
THREAD_MULTIPLE: int = 3

# --- Process topologies: kinds reported by Topo_test ------------------------------------
GRAPH: int = 1
CART: int = 2
DIST_GRAPH: int = 3

# --- Communicator split types (Split_type) -----------------------------------------------
COMM_TYPE_SHARED: int = 1
COMM_TYPE_HW_GUIDED: int = 2
COMM_TYPE_HW_UNGUIDED: int = 3
COMM_TYPE_RESOURCE_GUIDED: int = 4

# --- Datatype decoding: constructor that made a datatype (Get_envelope) ----------------
COMBINER_NAMED: int = 1
COMBINER_DUP: int = 2
COMBINER_CONTIGUOUS: int = 3
COMBINER_VECTOR: int = 4
COMBINER_HVECTOR: int = 6
COMBINER_INDEXED: int = 7
COMBINER_HINDEXED: int = 9
COMBINER_INDEXED_BLOCK: int = 10
COMBINER_STRUCT: int = 12
COMBINER_SUBARRAY: int = 13
COMBINER_DARRAY: int = 14
COMBINER_F90_REAL: int = 15
COMBINER_F90_COMPLEX: int = 16
COMBINER_F90_INTEGER: int = 17
COMBINER_RESIZED: int = 18
COMBINER_HINDEXED_BLOCK: int = 19
COMBINER_VALUE_INDEX: int = 20

# --- Datatypes: Fortran 90 type classes (Match_size) ------------------------------------
TYPECLASS_REAL: int = 1
TYPECLASS_INTEGER: int = 2
TYPECLASS_COMPLEX: int = 3
TYPECLASS_LOGICAL: int = 4

# --- Datatypes: array order and distributions (Create_subarray, Create_darray) ----------
ORDER_C: int = 56
ORDER_F: int = 57
ORDER_FORTRAN: int = ORDER_F
DISTRIBUTE_BLOCK: int = 121
DISTRIBUTE_CYCLIC: int = 122
DISTRIBUTE_NONE: int = 123
DISTRIBUTE_DFLT_DARG: int = -49767

# --- Fortran status layout (indices into an integer status array) -----------------------
F_SOURCE: int = 2
F_TAG: int = 3
F_ERROR: int = 4
F_STATUS_SIZE: int = 5

# --- One-sided communication: lock types and assertion modes ----------------------------
LOCK_EXCLUSIVE: int = 234
LOCK_SHARED: int = 235
MODE_NOCHECK: int = 1024
MODE_NOSTORE: int = 2048
MODE_NOPUT: int = 4096
MODE_NOPRECEDE: int = 8192
MODE_NOSUCCEED: int = 16384

# --- Parallel I/O: file access modes, seek whence values, displacements -----------------
MODE_CREATE: int = 1
MODE_RDONLY: int = 2
MODE_WRONLY: int = 4
MODE_RDWR: int = 8
MODE_DELETE_ON_CLOSE: int = 16
MODE_UNIQUE_OPEN: int = 32
MODE_EXCL: int = 64
MODE_APPEND: int = 128
MODE_SEQUENTIAL: int = 256
SEEK_SET: int = 600
SEEK_CUR: int = 602
SEEK_END: int = 604
DISPLACEMENT_CURRENT: int = -54278278
DISP_CUR: int = DISPLACEMENT_CURRENT
