"""The ``ipympi`` kernel: an IPython kernel in which every cell runs on N MPI ranks.

It is ipykernel's IPython kernel with the ipympi extension loaded, a session
of ``IPYMPI_NP`` ranks (default 4) started while the kernel itself starts (on
ipympi's own MPI, or on mpi4py with ``IPYMPI_BACKEND=mpi4py``, started by
``IPYMPI_LAUNCHER``: mpiexec or srun), and parallel mode on (``%autopx``): a
cell goes to every rank, ``%%local`` runs a cell in the kernel only, and
``%mpi``/``%px``/``%autopx`` are always the kernel's; ``%mpi status``, ``stop``
and ``restart`` also get past a running cell. Completion and inspection look
at rank 0's namespace, where the variables live. Start it
with ``python -m ipympi.kernel -f CONNECTION_FILE`` (``ipympi install``
writes the kernel spec).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
from typing import Any

from .notebook.controller import session

if __name__ == "__main__":
    # Started as the kernel: the engines' supervisor imports what it needs while
    # this process imports ipykernel below.
    session.prestart()

import IPython
from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp
from IPython.core.inputtransformer2 import cell_magic
from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult
from traitlets import default

from ._version import __version__
from .notebook.controller.interrupts import interrupts_at_waits
from .notebook.controller.launchers import ClusterError
from .notebook.controller.urgent import UrgentMagics

__all__ = ["IpympiKernel", "main"]

# What IPython's ExecutionInfo takes besides the cell, store_history, silent and
# shell_futures: IPython 8 takes cell_id, IPython 9 also cell_meta and
# transformed_cell.
_INFO_FIELDS = frozenset(inspect.signature(ExecutionInfo).parameters)

# IPython 9 counts a cell (execution_count) before running it, IPython 8 after.
_COUNTS_FIRST = IPython.version_info[0] >= 9

# Seconds rank 0 gets to answer a completion or inspection. Its first completion
# loads jedi's caches (about 2 s here, as in a stock kernel), so a loaded machine
# needs more than that; a rank busy with a --noblock cell answers only after it.
ASK_TIMEOUT = 5.0


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
        self._cell_scope = contextlib.ExitStack()  # what a parallel cell holds until its reply
        self._urgent = UrgentMagics(self)
        from .magics import load_ipython_extension

        self.parallel = load_ipython_extension(self.shell)
        self.parallel.autopx.enabled = True
        try:
            cluster = session.current(start=True)
            cluster.start(wait=False)  # the engines start while the kernel does
        except (ClusterError, OSError) as exc:
            session.set_start_error(str(exc))
            print(f"ipympi: cannot start the MPI session: {exc}", file=sys.__stderr__)

    # -- parallel cells ---------------------------------------------------------------------
    async def do_execute(
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict[str, Any] | None = None,
        cell_id: str | None = None,
    ) -> dict[str, Any]:
        """Send a parallel cell straight to the ranks; anything else runs as in IPython.

        In parallel mode a cell that starts with no magic would become
        ``%%px`` + cell through the ``%autopx`` transformer and reach
        ``run_on_ranks`` through IPython's ``run_cell``. Going there directly
        skips transforming, compiling and running the one-line ``%%px`` call
        in the kernel, about a fifth of the kernel's time in a trivial cell,
        while keeping what ``run_cell`` gives a cell: its number, history, the
        execution events, the error display and the reply.
        """
        body = self.parallel.autopx.straight_body(code)
        if body is None:
            return await super().do_execute(
                code,
                silent,
                store_history,
                user_expressions,
                allow_stdin,
                cell_meta=cell_meta,
                cell_id=cell_id,
            )
        # Ctrl-C only where the controller waits for the ranks, until the reply
        # has left (see execute_request).
        self._cell_scope.enter_context(interrupts_at_waits())
        self._forward_input(allow_stdin)
        try:
            result = run_parallel_cell(
                self.shell, self.parallel, code, body, silent, store_history, cell_id, cell_meta
            )
        finally:
            self._restore_input()
        return self._execute_reply(result, user_expressions)

    async def execute_request(self, *args: Any, **kwargs: Any) -> None:
        """ipykernel's, ending what :meth:`do_execute` keeps until the reply has left.

        A Ctrl-C that came after a parallel cell ended and before its reply was
        sent (ipykernel sleeps 0.5 ms there) escaped the handler and the cell
        never got a reply; the interrupt is now taken only while the controller
        waits for the ranks, and dropped once the reply has left.
        """
        try:
            await super().execute_request(*args, **kwargs)
        finally:
            self._cell_scope.close()

    async def shell_channel_thread_main(self, msg: Any) -> None:
        """ipykernel's, but ``%mpi status``/``stop``/``restart`` get past a running
        parallel cell (:mod:`ipympi.notebook.controller.urgent`)."""
        if not self._urgent.take(msg):
            await super().shell_channel_thread_main(msg)

    def _execute_reply(
        self, result: ExecutionResult, user_expressions: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The content of the execute reply, as ipykernel builds it."""
        shell = self.shell
        assert shell is not None  # replies follow executions, which need the shell
        reply: dict[str, Any] = {"execution_count": shell.execution_count - 1}
        error = result.error_in_exec
        if error is None:
            reply["status"] = "ok"
            reply["user_expressions"] = shell.user_expressions(user_expressions or {})
        else:
            reply.update(
                status="error",
                traceback=shell._last_traceback or [],
                ename=type(error).__name__,
                evalue=str(error),
                user_expressions={},
            )
        reply["payload"] = shell.payload_manager.read_payload()
        shell.payload_manager.clear_payload()
        return reply

    # -- completion and inspection in the ranks' namespace ------------------------------------
    def _ask_rank0(
        self, kind: str, content: dict[str, Any], parallel_cell: bool
    ) -> dict[str, Any] | None:
        """Rank 0's answer, for a ``%%px`` cell or any cell in parallel mode; else None."""
        if not (parallel_cell or self.parallel.autopx.enabled):
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
        body, offset = _parallel_body(code)
        if body is not None and cursor_pos >= offset and not self._is_local(body):
            position = cursor_pos - offset
            request = {"code": body, "cursor_pos": position}
            answer = self._ask_rank0("complete", request, offset > 0)
            if answer is not None:
                return {
                    "status": "ok",
                    "matches": answer.get("matches", []),
                    "cursor_start": offset + answer.get("cursor_start", position),
                    "cursor_end": offset + answer.get("cursor_end", position),
                    "metadata": {},
                }
        return super().do_complete(code, cursor_pos)

    def do_inspect(
        self, code: str, cursor_pos: int, detail_level: int = 0, omit_sections: Any = ()
    ) -> Any:
        body, offset = _parallel_body(code)
        if body is not None and cursor_pos >= offset and not self._is_local(body):
            request = {
                "code": body,
                "cursor_pos": cursor_pos - offset,
                "detail_level": detail_level,
            }
            answer = self._ask_rank0("inspect", request, offset > 0)
            if answer is not None and answer.get("found"):
                return {
                    "status": "ok",
                    "found": True,
                    "data": answer.get("data", {}),
                    "metadata": {},
                }
        return super().do_inspect(code, cursor_pos, detail_level, omit_sections)


def run_parallel_cell(
    shell: Any,
    parallel: Any,
    code: str,
    body: list[str],
    silent: bool,
    store_history: bool,
    cell_id: str | None,
    cell_meta: dict[str, Any] | None,
) -> ExecutionResult:
    """Run a cell on the ranks as IPython's ``run_cell`` runs ``%%px`` + ``body``.

    ``code`` is the cell as typed, ``body`` the lines the ranks run (see
    :meth:`AutoParallel.straight_body <ipympi.magics._autopx.AutoParallel.straight_body>`).

    The cell gets its number and its history entry (the ``%%px`` call IPython
    would have stored), the ``pre_``/``post_execute`` and ``_run_cell`` events
    fire, an error is shown and recorded as ``run_cell`` does, and a value
    (a ``--noblock`` cell's result) goes through the display hook.
    """
    if silent:
        store_history = False
    source = "".join(cell_magic(["%%px\n", *body]))
    extra = {"cell_id": cell_id, "cell_meta": cell_meta, "transformed_cell": source}
    info = ExecutionInfo(
        code, store_history, silent, True, **{k: v for k, v in extra.items() if k in _INFO_FIELDS}
    )
    result = ExecutionResult(info)
    result.execution_count = count = shell.execution_count
    shell._last_traceback = None
    shell._last_traceback_during_displayhook = False
    if store_history and _COUNTS_FIRST:
        shell.execution_count += 1
    try:
        shell.events.trigger("pre_execute")
        if not silent:
            shell.events.trigger("pre_run_cell", info)
        if store_history:
            shell.history_manager.store_inputs(count, source, code)
        if not silent:
            shell.logger.log(source, code)
        try:
            value = parallel.run_on_ranks("".join(body))
        except BaseException as exc:  # shown as run_cell shows it; the reply says error
            result.error_in_exec = exc
            shell.showtraceback(running_compiled_code=True)
        else:
            if value is not None and not silent:
                shell.displayhook.exec_result = result
                try:
                    shell.displayhook(value)
                finally:
                    shell.displayhook.exec_result = None
        shell.last_execution_succeeded = result.error_in_exec is None
        shell.last_execution_result = result
        if store_history:
            shell.history_manager.store_output(count)
            if not _COUNTS_FIRST:
                shell.execution_count += 1
    finally:
        shell.events.trigger("post_execute")
        if not silent:
            shell.events.trigger("post_run_cell", result)
    return result


def _parallel_body(code: str) -> tuple[str | None, int]:
    """The code the ranks would run, and where it starts in ``code``.

    A ``%%px``/``%%mpi`` cell's body starts after its first line; other cells
    are the ranks' as a whole. ``None`` for a ``%%px`` cell's own first line.
    """
    words = code.lstrip().split(None, 1)
    if words and words[0] in ("%%px", "%%mpi"):
        newline = code.find("\n")
        return (None, 0) if newline < 0 else (code[newline + 1 :], newline + 1)
    return code, 0


class IpympiKernelApp(IPKernelApp):
    name = "ipympi-kernel"

    @default("outstream_class")
    def _default_outstream_class(self) -> str:
        return "ipympi.notebook.outstream.OutStream"

    def init_kernel(self) -> None:
        # ipympi's log (output a rank wrote outside any cell, a bad control frame) goes
        # where the kernel's own log goes, the terminal: through the root logger it
        # would reach sys.stderr, which is the running cell's output here.
        logger = logging.getLogger("ipympi")
        for handler in self.log.handlers:
            logger.addHandler(handler)
        logger.propagate = not logger.handlers
        super().init_kernel()


def main() -> None:
    IpympiKernelApp.launch_instance(kernel_class=IpympiKernel)


if __name__ == "__main__":
    main()
