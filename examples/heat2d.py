"""The 2-D heat equation on a Cartesian process grid.

Run with ``python -m ipympi.run -n 4 examples/heat2d.py``. The unit square is
an ``NX`` x ``NY`` grid with fixed (zero) temperature on its boundary and a hot
spot in the middle. ``Compute_dims`` and ``Create_cart`` arrange the ranks in a
non-periodic grid; each rank owns a block of the field with one layer of ghost
cells around it, refreshed before every explicit time step by a halo exchange:
``Shift`` gives the neighbours in each direction (``PROC_NULL`` at the edges of
the domain, where ``Sendrecv`` does nothing) and ``Sendrecv`` swaps the
boundary rows and columns. At the end rank 0 gathers the blocks and compares the
field with the same computation done serially in numpy.
"""

from __future__ import annotations

import numpy as np

from ipympi import MPI

NX, NY = 48, 36  # interior points
STEPS = 200
ALPHA = 0.2  # diffusion number dt * k / h**2 (stable below 0.25)


def initial() -> np.ndarray:
    """The whole field with its zero boundary: a hot rectangle in the middle."""
    u = np.zeros((NX + 2, NY + 2))
    u[NX // 3 : 2 * NX // 3, NY // 4 : NY // 2] = 1.0
    return u


def step(u: np.ndarray) -> None:
    """One explicit step on the interior of ``u`` (its outer layer stays fixed)."""
    u[1:-1, 1:-1] += ALPHA * (
        u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    )


def split(n: int, parts: int, i: int) -> tuple[int, int]:
    """The range of ``n`` points owned by block ``i`` of ``parts``."""
    base, extra = divmod(n, parts)
    start = i * base + min(i, extra)
    return start, start + base + (i < extra)


def exchange(cart: MPI.Cartcomm, u: np.ndarray) -> None:
    """Refresh the ghost cells of ``u`` from the four neighbours."""
    down, up = cart.Shift(0, 1)  # neighbours along the first axis
    left, right = cart.Shift(1, 1)
    # rows: send the last interior row up, receive the lower ghost row from below
    buf = np.empty(u.shape[1])
    cart.Sendrecv(np.ascontiguousarray(u[-2, :]), up, 0, buf, down, 0)
    if down != MPI.PROC_NULL:
        u[0, :] = buf
    cart.Sendrecv(np.ascontiguousarray(u[1, :]), down, 1, buf, up, 1)
    if up != MPI.PROC_NULL:
        u[-1, :] = buf
    # columns (after the rows, so the corners travel too)
    buf = np.empty(u.shape[0])
    cart.Sendrecv(np.ascontiguousarray(u[:, -2]), right, 2, buf, left, 2)
    if left != MPI.PROC_NULL:
        u[:, 0] = buf
    cart.Sendrecv(np.ascontiguousarray(u[:, 1]), left, 3, buf, right, 3)
    if right != MPI.PROC_NULL:
        u[:, -1] = buf


def main() -> None:
    comm = MPI.COMM_WORLD
    dims = MPI.Compute_dims(comm.Get_size(), 2)
    cart = comm.Create_cart(dims, periods=[False, False])
    px, py = cart.Get_coords(cart.Get_rank())
    x0, x1 = split(NX, dims[0], px)
    y0, y1 = split(NY, dims[1], py)

    # the block with its ghost layer, cut out of the global field (1-based interior)
    u = initial()[x0 : x1 + 2, y0 : y1 + 2].copy()
    for _ in range(STEPS):
        exchange(cart, u)
        step(u)

    blocks = cart.gather(((x0, x1, y0, y1), u[1:-1, 1:-1]), root=0)
    if cart.Get_rank() == 0:
        field = np.zeros((NX + 2, NY + 2))
        for (a, b, c, d), block in blocks:
            field[a + 1 : b + 1, c + 1 : d + 1] = block
        serial = initial()
        for _ in range(STEPS):
            step(serial)
        diff = float(np.abs(field - serial).max())
        print(f"grid {dims[0]}x{dims[1]}, {STEPS} steps, max |parallel - serial| = {diff:.3e}")
    cart.Free()


if __name__ == "__main__":
    main()
