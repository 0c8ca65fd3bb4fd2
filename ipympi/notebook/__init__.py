"""The notebook side: the ``ipympi`` kernel's controller and the per-rank engines.

``controller/`` runs in the kernel: it starts a session's engines, fans cells out, and
renders their output, errors and state. ``engine/`` runs in each rank's process: an
IPython shell that is also one MPI rank. ``kernelspec``, ``lab`` and ``outstream`` serve
``ipympi install``, ``ipympi lab`` and the kernel's own streams.
"""
