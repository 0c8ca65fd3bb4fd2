"""The ``ipympi`` kernel: an IPython kernel in which every cell runs on N MPI ranks.

It is ipykernel's IPython kernel with the ipympi extension loaded, a session
of ``IPYMPI_NP`` ranks (default 4) started while the kernel itself starts, and
parallel mode on (``%autopx``): a cell goes to every rank, ``%%local`` runs a
cell in the kernel only, and ``%mpi``/``%px``/``%autopx`` are always the
kernel's. Completion and inspection look at rank 0's namespace, where the
variables live. Start it with ``python -m ipympi.kernel -f CONNECTION_FILE``
(``ipympi install`` writes the kernel spec).
"""

from __future__ import annotations

import sys
from typing import Any

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp

from . import __version__
from .controller import session
from .controller.cluster import Cluster, ClusterError

__all__ = ["IpympiKernel", "main"]

ASK_TIMEOUT = 2.0  # seconds rank 0 gets to answer a completion or inspection


class IpympiKernel(IPythonKernel):
    """ipykernel's kernel, with every cell sent to the ranks."""

    implementation = "ipympi"
    implementation_version = __version__
    banner = (
        "ipympi: every cell runs on each MPI rank (MPI, comm, rank and size are defined).\n"
        "%%local runs a cell here only; %mpi status shows the ranks."
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from .magics import load_ipython_extension

        self.parallel = load_ipython_extension(self.shell)
        self.parallel.autopx.enabled = True
        try:
            cluster = Cluster(session.default_size())
            session.set_current(cluster)
            cluster.start(wait=False)  # the engines start while the kernel does
        except (ClusterError, OSError) as exc:
            print(f"ipympi: cannot start the MPI session: {exc}", file=sys.__stderr__)

    # -- completion and inspection in the ranks' namespace ------------------------------------
    def _ask_rank0(self, kind: str, content: dict[str, Any]) -> dict[str, Any] | None:
        if not self.parallel.autopx.enabled:
            return None
        try:
            cluster = session.current()
        except ClusterError:
            return None
        if not cluster.ready:
            return None
        req = cluster.submit(kind, content, [0])
        cluster.wait(req, ASK_TIMEOUT)
        cluster.forget(req)
        reply = req.replies.get(0)
        if reply is None or reply.content.get("status") != "ok":
            return None
        return dict(reply.content)

    def _is_local(self, code: str) -> bool:
        from .magics._autopx import CONTROLLER_MAGICS, LOCAL

        words = code.lstrip().split(None, 1)
        return bool(words) and (words[0] == LOCAL or words[0] in CONTROLLER_MAGICS)

    def do_complete(self, code: str, cursor_pos: int | None) -> Any:
        if cursor_pos is None:
            cursor_pos = len(code)
        if not self._is_local(code):
            answer = self._ask_rank0("complete", {"code": code, "cursor_pos": cursor_pos})
            if answer is not None:
                return {
                    "status": "ok",
                    "matches": answer.get("matches", []),
                    "cursor_start": answer.get("cursor_start", cursor_pos),
                    "cursor_end": answer.get("cursor_end", cursor_pos),
                    "metadata": {},
                }
        return super().do_complete(code, cursor_pos)

    def do_inspect(
        self, code: str, cursor_pos: int, detail_level: int = 0, omit_sections: Any = ()
    ) -> Any:
        if not self._is_local(code):
            answer = self._ask_rank0(
                "inspect", {"code": code, "cursor_pos": cursor_pos, "detail_level": detail_level}
            )
            if answer is not None and answer.get("found"):
                return {
                    "status": "ok",
                    "found": True,
                    "data": answer.get("data", {}),
                    "metadata": {},
                }
        return super().do_inspect(code, cursor_pos, detail_level, omit_sections)


class IpympiKernelApp(IPKernelApp):
    name = "ipympi-kernel"


def main() -> None:
    IpympiKernelApp.launch_instance(kernel_class=IpympiKernel)


if __name__ == "__main__":
    main()
