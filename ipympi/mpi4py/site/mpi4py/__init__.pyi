# Types of ``mpi4py``, the package on ipympi's ranks.

from ipympi import rc as rc
from ipympi.mpi4py.toplevel import get_config as get_config
from ipympi.mpi4py.toplevel import get_include as get_include
from ipympi.mpi4py.toplevel import profile as profile

__version__: str
