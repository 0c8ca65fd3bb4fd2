"""Fault injection through the ``ipympi`` kernel: time to report each fault, and recovery.

``python benchmarks/faults.py [--np 4] [--json FILE] [--timeout 60]``

Starts one ``ipympi`` kernel of N ranks, as Jupyter does, and runs a faulty cell
per scenario (the scenarios of ``tests/test_faults.py``): an exception on one
rank or on all, a deadlock, a skipped barrier, mismatched collectives, a rank
killed by SIGKILL or ending with ``os._exit``, ``comm.Abort``, an endless loop
stopped by an interrupt, an MPI error completing an ``Irecv``, and a failing
``--noblock`` cell. For each it prints how long the error report took, its
name and summary line, and whether the kernel was usable afterwards. See
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import ast
import json
import queue
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import ipympi_env, machine, shut_down_kernel  # noqa: E402

SCRIPT = "faults.py"
KERNEL_NAME = "ipympi-faults-bench"
INTERRUPT_AFTER = 1.0  # seconds an endless loop runs before the interrupt
SUMMARY_CHARS = 70
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class Scenario:
    """One faulty cell and how the kernel is expected to recover from it.

    ``recovery`` is ``"survives"`` (the world and its variables survive),
    ``"restart"`` (a rank died: ``%mpi restart`` first) or ``"fresh"`` (the
    world ended and the next cell starts a new one by itself).
    """

    name: str
    code: Callable[[int], str]
    recovery: str = "survives"
    interrupt: bool = False  # interrupt the kernel INTERRUPT_AFTER s after sending the cell
    noblock: bool = False  # a --noblock cell, its error shown by %pxresult (timed)


SCENARIOS = (
    Scenario(
        "exception on one rank",
        lambda n: f"1 / 0 if rank == {n // 2} else comm.Barrier()",
    ),
    Scenario("exception on all ranks", lambda n: "1 / 0"),
    Scenario(
        "deadlock: two receives",
        lambda n: "comm.recv(source=(rank ^ 1) % size, tag=7)",
    ),
    Scenario(
        "one rank skips a barrier",
        lambda n: f"if rank != {n - 1}:\n    comm.Barrier()",
    ),
    Scenario(
        "mismatched collectives",
        lambda n: "if rank == 0:\n    comm.bcast(1, root=0)\nelse:\n    comm.reduce(1, root=0)",
    ),
    Scenario(
        "SIGKILL of one rank in a Barrier",
        lambda n: (
            "import os, signal\n"
            f"if rank == {n // 2}:\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "comm.Barrier()"
        ),
        recovery="restart",
    ),
    Scenario(
        "os._exit(3) on one rank",
        lambda n: "import os\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()",
        recovery="restart",
    ),
    Scenario(
        "comm.Abort(5) on one rank",
        lambda n: "if rank == 1:\n    comm.Abort(5)\ncomm.Barrier()",
        recovery="fresh",
    ),
    Scenario(
        "endless loop + interrupt",
        lambda n: "spins = 0\nwhile True:\n    spins += 1",
        interrupt=True,
    ),
    Scenario(
        "Irecv too small, error on Wait",
        lambda n: (
            "import numpy as np\n"
            "if rank == 0:\n"
            "    buf = np.zeros(2)\n"
            "    req = comm.Irecv(buf, source=1, tag=1)\n"
            "    req.Wait()\n"
            "elif rank == 1:\n"
            "    comm.Send(np.ones(10), dest=0, tag=1)"
        ),
    ),
    Scenario(
        "error in a --noblock cell",
        lambda n: (
            "%%px --noblock\n"
            "import time\n"
            "time.sleep(1.0)\n"
            "if rank == 1:\n"
            "    raise ValueError('late failure')"
        ),
        noblock=True,
    ),
)


class DriverError(RuntimeError):
    """The kernel could not be started, or stopped answering."""


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=4, help="ranks of the kernel (4)")
    parser.add_argument("--json", metavar="PATH", help="also write every result to PATH")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per cell (60)")
    args = parser.parse_args(argv)
    if args.np < 2:
        parser.error("--np must be at least 2")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    return args


# -- a kernel and a client ----------------------------------------------------------------


@dataclass
class Outcome:
    """What one cell did: its reply's content, its error's lines, its result's values."""

    reply: dict[str, Any]
    error: list[str]  # the traceback lines of its error message, ANSI codes removed
    error_at: float | None  # monotonic time the error message arrived
    results: list[tuple[list[int], str]]  # (ranks, text/plain) of each execute_result
    stderr: str

    @property
    def ok(self) -> bool:
        return self.reply.get("status") == "ok"


class Kernel:
    """The ``ipympi`` kernel of ``ranks`` ranks, started from a spec in ``spec_dir``."""

    def __init__(self, spec_dir: Path, ranks: int, timeout: float) -> None:
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager

        spec = {
            "argv": [sys.executable, "-m", "ipympi.kernel", "-f", "{connection_file}"],
            "display_name": KERNEL_NAME,
            "language": "python",
        }
        (spec_dir / KERNEL_NAME).mkdir()
        (spec_dir / KERNEL_NAME / "kernel.json").write_text(json.dumps(spec) + "\n")
        self.timeout = timeout
        self.env = {k: v for k, v in ipympi_env().items() if not k.startswith("IPYMPI_")}
        self.env["IPYMPI_NP"] = str(ranks)
        self.log = (spec_dir / "kernel.log").open("ab")
        self.manager = KernelManager(
            kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[spec_dir])
        )
        self.client: Any = None

    def start(self) -> None:
        self.manager.start_kernel(env=self.env, stdout=self.log, stderr=self.log)
        self.connect()

    def connect(self) -> None:
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=self.timeout)

    def restart_kernel(self) -> None:
        """Replace a kernel that stopped answering."""
        self.client.stop_channels()
        self.manager.restart_kernel(now=True)
        self.connect()

    def stop(self) -> None:
        """Shut the kernel down, killing it if it does not go; close the client and log."""
        shut_down_kernel(self.manager, self.client, self.log)

    def send(self, code: str) -> str:
        return self.client.execute(code, allow_stdin=False)

    def collect(self, msg_id: str) -> Outcome:
        """The reply to ``msg_id`` and what IOPub showed for it, up to ``status: idle``."""
        deadline = time.monotonic() + self.timeout
        error: list[str] = []
        error_at = None
        results: list[tuple[list[int], str]] = []
        stderr = []
        while True:
            msg = self._get(self.client.get_iopub_msg, deadline, msg_id)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "error":
                error_at = time.monotonic()
                error = [ANSI.sub("", entry) for entry in content["traceback"]]
            elif kind == "execute_result":
                ranks = msg["metadata"].get("ipympi", {}).get("ranks", [])
                results.append((ranks, content["data"].get("text/plain", "")))
            elif kind == "stream" and content["name"] == "stderr":
                stderr.append(content["text"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
        reply = self._get(self.client.get_shell_msg, deadline, msg_id)["content"]
        return Outcome(reply, error, error_at, results, "".join(stderr))

    def _get(self, get: Callable[..., dict], deadline: float, msg_id: str) -> dict:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {self.timeout:g} s")
            try:
                msg = get(timeout=min(left, 0.5))
            except queue.Empty:
                if not self.manager.is_alive():
                    raise DriverError("the kernel exited") from None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def run(self, code: str) -> Outcome:
        return self.collect(self.send(code))

    def drain(self) -> None:
        """Drop IOPub messages of abandoned requests."""
        try:
            while True:
                self.client.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            pass


# -- one scenario -------------------------------------------------------------------------


def follow_up(kernel: Kernel, scenario: Scenario, ranks: int) -> tuple[bool, str]:
    """Is the kernel usable after the fault? (yes/no, and what was seen)

    Usable: ``comm.allreduce(1)`` gives ``ranks`` on every rank (one collapsed
    result), and ``kept``, defined before the fault, survived where the world did.
    """
    if scenario.recovery == "restart":
        restarted = kernel.run("%mpi restart")
        if not restarted.ok:
            return False, f"%mpi restart failed: {restarted.reply.get('evalue', '')}"
    if scenario.recovery == "survives":
        code, expected = "comm.allreduce(1), comm.allgather(kept)", (ranks, kept_values(ranks))
    else:
        code, expected = "comm.allreduce(1), 'kept' in dir()", (ranks, False)
    outcome = kernel.run(code)
    if not outcome.ok:
        return False, f"{outcome.reply.get('ename')}: {outcome.reply.get('evalue', '')}"
    if len(outcome.results) != 1 or outcome.results[0][0] != list(range(ranks)):
        return False, f"the ranks gave different results: {outcome.results}"
    value = ast.literal_eval(outcome.results[0][1])
    return value == expected, f"{value!r}"


def kept_values(ranks: int) -> list[int]:
    """``kept`` of every rank, in rank order (each rank sets ``kept = rank * 10``)."""
    return [10 * rank for rank in range(ranks)]


def run_scenario(kernel: Kernel, scenario: Scenario, ranks: int) -> dict[str, Any]:
    """Run one scenario; its row (and details for the JSON document)."""
    setup = kernel.run("kept = rank * 10")
    if not setup.ok:
        raise DriverError(f"the kernel is not usable before {scenario.name!r}")
    code = scenario.code(ranks)
    row: dict[str, Any] = {"scenario": scenario.name, "code": code, "recovery": scenario.recovery}
    if scenario.noblock:
        submitted = kernel.run(code)
        row["noblock_reply"] = submitted.reply.get("status")
        code = "%pxresult"
    msg_id = kernel.send(code)
    started = time.monotonic()
    if scenario.interrupt:
        time.sleep(INTERRUPT_AFTER)
        kernel.manager.interrupt_kernel()
        started = time.monotonic()
    try:
        outcome = kernel.collect(msg_id)
    except TimeoutError:
        row.update(report_s=None, ename=None, summary="(no report)", usable=False)
        kernel.restart_kernel()
        return row
    reported = outcome.error_at if outcome.error_at is not None else time.monotonic()
    row["report_s"] = reported - started
    row["ename"] = outcome.reply.get("ename") if not outcome.ok else None
    row["evalue"] = outcome.reply.get("evalue")
    row["summary"] = outcome.error[0].splitlines()[0] if outcome.error else "(no error)"
    usable, seen = follow_up(kernel, scenario, ranks)
    row["usable"] = usable
    row["follow_up"] = seen
    row["repaired"] = not usable
    if not usable:
        repair(kernel)
    return row


def repair(kernel: Kernel) -> None:
    """Leave a working world for the next scenario: retry once, else ``%mpi restart``."""
    kernel.drain()
    if kernel.run("comm.allreduce(1)").ok:
        return
    if not kernel.run("%mpi restart").ok:
        kernel.restart_kernel()


# -- the table ----------------------------------------------------------------------------

COLUMNS = ("scenario", "time to report (s)", "ename", "summary (first 70 chars)", "usable after")


def render(rows: list[dict[str, Any]], ranks: int) -> str:
    lines = [
        f"Fault injection through the ipympi kernel, {ranks} ranks ({machine()})",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(["---"] * len(COLUMNS)) + "|",
    ]
    for row in rows:
        took = "timeout" if row["report_s"] is None else f"{row['report_s']:.2f}"
        cells = [
            row["scenario"],
            took,
            row["ename"] or "-",
            "`" + row["summary"][:SUMMARY_CHARS].replace("|", "\\|") + "`",
            "yes" if row["usable"] else "no",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    restarted = ", ".join(s.name for s in SCENARIOS if s.recovery == "restart")
    lines += [
        "",
        "time to report: from sending the cell to its error message; from the interrupt for",
        "  the endless loop; from sending %pxresult for --noblock (the cell sleeps 1 s first).",
        f"usable after: comm.allreduce(1) gives {ranks} on every rank, and a variable defined",
        "  before the fault is intact where the world survived;",
        f"  after %mpi restart for: {restarted}.",
    ]
    return "\n".join(lines)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    signal.signal(signal.SIGTERM, _terminate)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ipympi-faults-bench-") as tmp:
        kernel = Kernel(Path(tmp), args.np, args.timeout)
        try:
            kernel.start()
            first = kernel.run("comm.Barrier()")
            if not first.ok:
                raise DriverError(f"the first cell failed: {first.reply.get('evalue')}")
            for scenario in SCENARIOS:
                print(f"{SCRIPT}: {scenario.name} ...", file=sys.stderr, flush=True)
                rows.append(run_scenario(kernel, scenario, args.np))
        except (DriverError, TimeoutError, RuntimeError) as exc:
            print(f"{SCRIPT}: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"{SCRIPT}: interrupted", file=sys.stderr)
            return 130
        finally:
            kernel.stop()
    print(render(rows, args.np), flush=True)
    if args.json:
        document = {"ranks": args.np, "machine": machine(), "rows": rows}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
