"""IPython magics for ipympi (``%mpi``, ``%%px``, ...); see the notebook issue."""
