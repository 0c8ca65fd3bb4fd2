"""Teaching views: what MPI calls really do, drawn from the messages of a real run.

* :mod:`.trace` — traces of a cell's messages on every rank (``%%px --trace``),
  drawn as a space-time diagram (SVG) or as text;
* :mod:`.explain` — one collective call round by round (``%mpi explain``);
* :mod:`.show` — a variable on every rank side by side (``%mpi show``).
"""
