"""Session start-up and per-cell round trips of ipympi, stock ipykernel and IPython Parallel.

``python benchmarks/session.py [--repeat 5] [--cells 200] [--quick] [--no-ipyparallel]
[--no-mpi4py] [--no-ipp-api] [--json FILE]``

Starts the ``ipympi`` kernel (4 ranks), the stock IPython kernel (one process, the
floor) and a 4-engine IPython Parallel cluster (when ``ipyparallel`` is installed),
times how long each takes until a first cell has run, then the round trip of a
trivial cell and of a cell that prints on every rank, and prints one table of
min / median. Where mpi4py and an MPI are installed, the ``ipympi`` kernel on the
mpi4py backend (``IPYMPI_BACKEND=mpi4py``, ranks started by mpiexec) gets two more
rows: session ready and trivial cell. A second table times IPython Parallel's client
API three ways (``ipp.Cluster(engines="mpi")`` on the installed MPI,
``ipp.Cluster(engines="ipympi")``, ``ipympi.Cluster``): ready and ``apply_sync``
(see ``_ipp_api.py``). See ``benchmarks/README.md`` for what each row means.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _ipp_api  # noqa: E402
from _harness import (  # noqa: E402
    ROOT,
    BenchmarkError,
    announce,
    cell,
    ipympi_env,
    machine,
    ratio,
    run_jobs,
    shut_down_kernel,
)

RANKS = 4
IMPLS = ("ipympi", "ipykernel", "ipyparallel")
TITLES = {"ipympi": "ipympi", "ipykernel": "ipykernel", "ipyparallel": "IPython Parallel"}
# (key, label, unit); "ready" is timed per fresh start, the others per cell. The
# "_mpi4py" rows are the ipympi kernel's on the mpi4py backend (ipympi column only).
ROWS = (
    ("ready", "session ready, s", "s"),
    ("trivial", "trivial cell, ms", "ms"),
    ("print", "print on every rank, ms", "ms"),
    ("ready_hosts", "  on 2 hosts: ready, s", "s"),
    ("trivial_hosts", "  on 2 hosts: trivial, ms", "ms"),
    ("ready_mpi4py", "  on mpi4py: ready, s", "s"),
    ("trivial_mpi4py", "  on mpi4py: trivial, ms", "ms"),
)
MPI4PY_ROWS = ("ready", "trivial")  # what the mpi4py backend (and a 2-host session) is timed for
# The ipympi kernel's ranks on two "hosts" (loopback addresses): supervisors, tcp.
TWO_HOSTS = "127.0.0.2:2,127.0.0.3:2"
# A cell that says which mpi4py and MPI library the mpi4py backend's ranks run.
MPI4PY_VERSION = (
    "%%px -t 0\nimport mpi4py\n"
    "name, version = MPI.get_vendor()\n"
    "print(f'mpi4py {mpi4py.__version__} on {name}', '.'.join(map(str, version)))"
)
SCALE = {"s": 1.0, "ms": 1e3}
# The cell each system runs for each row.
CODE = {
    "ipympi": {"ready": "comm.Barrier()", "trivial": "pass", "print": "print(rank)"},
    "ipympi-mpi4py": {"ready": "comm.Barrier()", "trivial": "pass"},
    "ipympi-hosts": {"ready": "comm.Barrier()", "trivial": "pass"},
    "ipykernel": {"ready": "pass", "trivial": "pass", "print": "print(0)"},
    "ipyparallel": {"ready": "pass", "trivial": "pass", "print": "print(0)"},
}
# What "print on every rank" must print: one line per rank, ending in this value.
PRINTED = {
    "ipympi": [str(rank) for rank in range(RANKS)],
    "ipykernel": ["0"],
    "ipyparallel": ["0"] * RANKS,
}
TARGETS = "targets: session ready ≤ 1.0 s; trivial cell ≤ 3 ms"
KERNEL_NAMES = {
    "ipympi": "ipympi-session-bench",
    "ipympi-mpi4py": "ipympi-mpi4py-session-bench",
    "ipympi-hosts": "ipympi-hosts-session-bench",
    "ipykernel": "ipykernel-session-bench",
}
RECONNECT_MS = 10  # how often the client retries connecting to a kernel still starting
LABEL_WIDTH = 25
VALUE_WIDTH = 18
RATIO_WIDTH = 18
SCRIPT = "session.py"


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``repeat``, ``cells`` and ``warmup`` are resolved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=None, help="fresh starts per system (5; 2 with --quick)"
    )
    parser.add_argument(
        "--cells", type=int, default=None, help="timed cells per row (200; 20 with --quick)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2 starts and 20 cells by default"
    )
    parser.add_argument(
        "--no-ipyparallel", action="store_true", help="skip the IPython Parallel column"
    )
    parser.add_argument("--no-mpi4py", action="store_true", help="skip the mpi4py rows")
    parser.add_argument(
        "--no-ipp-api", action="store_true", help="skip the table of IPython Parallel's API"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every time and the table")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds allowed per operation (60)"
    )
    args = parser.parse_args(argv)
    args.repeat = args.repeat if args.repeat is not None else (2 if args.quick else 5)
    args.cells = args.cells if args.cells is not None else (20 if args.quick else 200)
    args.warmup = 3 if args.quick else 20
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.cells < 1:
        parser.error("--cells must be at least 1")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    return args


def ipyparallel_missing() -> str | None:
    """Why IPython Parallel cannot be benchmarked here, or None when it can."""
    if importlib.util.find_spec("ipyparallel") is None:
        return "ipyparallel is not installed"
    try:
        import ipyparallel  # noqa: F401
    except Exception as exc:
        return f"cannot import ipyparallel: {exc!r}"
    return None


def mpi4py_backend_missing() -> str | None:
    """Why the mpi4py backend cannot be benchmarked here, or None when it can."""
    sys.path.insert(0, str(ROOT))
    try:
        from ipympi.notebook.controller.launchers import ClusterError
        from ipympi.notebook.controller.placement import make_launcher
    finally:
        sys.path.pop(0)
    try:
        make_launcher("mpi4py", None, os.environ)
    except ClusterError as exc:
        return str(exc)
    return None


def check_printed(impl: str, text: str) -> None:
    """Fail unless ``text`` is one line per rank ending in the printed value."""
    values = sorted(line.split()[-1] for line in text.splitlines() if line.strip())
    if values != PRINTED[impl]:
        raise BenchmarkError(f"print cell wrote {text!r}, expected {PRINTED[impl]} (last words)")


# -- Jupyter kernels ------------------------------------------------------------------------


def write_kernel_specs(directory: Path) -> None:
    """Kernel specs of the ipympi kernel (4 ranks) and of the stock IPython kernel."""
    ipympi = [sys.executable, "-m", "ipympi.kernel", "-f", "{connection_file}"]
    argv = {
        "ipympi": ipympi,
        "ipympi-mpi4py": ipympi,
        "ipympi-hosts": ipympi,
        "ipykernel": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
    }
    for impl, name in KERNEL_NAMES.items():
        spec: dict[str, Any] = {"argv": argv[impl], "display_name": name, "language": "python"}
        if impl == "ipympi":
            spec["env"] = {"IPYMPI_NP": str(RANKS)}
        elif impl == "ipympi-mpi4py":
            spec["env"] = {"IPYMPI_NP": str(RANKS), "IPYMPI_BACKEND": "mpi4py"}
        elif impl == "ipympi-hosts":
            spec["env"] = {"IPYMPI_NP": str(RANKS), "IPYMPI_HOSTS": TWO_HOSTS}
        (directory / name).mkdir()
        (directory / name / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")


class Kernel:
    """One running kernel and a client of its shell and IOPub channels."""

    def __init__(
        self, spec_manager: Any, context: Any, impl: str, log: Path, timeout: float
    ) -> None:
        from jupyter_client.manager import KernelManager

        self.impl = impl
        self.timeout = timeout
        self.log = log
        self.manager = KernelManager(
            kernel_name=KERNEL_NAMES[impl], kernel_spec_manager=spec_manager
        )
        self.client: Any = None
        self.context = context
        self.output = log.open("ab")

    def start(self) -> None:
        """Start the kernel and connect to it; returns before the kernel is up."""
        env = ipympi_env() if self.impl.startswith("ipympi") else dict(os.environ)
        self.manager.start_kernel(env=env, cwd=str(ROOT), stdout=self.output, stderr=self.output)
        self.client = self.manager.client(context=self.context)
        self.client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)

    def _fail(self, what: str) -> BenchmarkError:
        text = self.log.read_text(errors="replace").strip().splitlines()
        # Without the kernel's warning that its TCP connections are not encrypted.
        tail = "\n".join([line for line in text if "without encryption" not in line][-15:])
        return BenchmarkError(f"{what}" + (f"\nkernel output:\n{tail}" if tail else ""))

    def _get(self, channel: Any, deadline: float, what: str) -> dict[str, Any]:
        """The next message on ``channel``; fails at ``deadline`` or when the kernel died."""
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise self._fail(f"no {what} within {self.timeout:g} s")
            try:
                return channel.get_msg(timeout=min(left, 0.5))
            except Empty:
                if not self.manager.is_alive():
                    raise self._fail(f"the kernel exited while waiting for {what}") from None

    def reply(self, msg_id: str, what: str) -> dict[str, Any]:
        """The content of the shell reply to ``msg_id``; fails unless its status is ok."""
        deadline = time.perf_counter() + self.timeout
        while True:
            msg = self._get(self.client.shell_channel, deadline, f"reply to {what}")
            if msg["parent_header"].get("msg_id") == msg_id:
                content = msg["content"]
                if content.get("status") != "ok":
                    detail = f"{content.get('ename', '')}: {content.get('evalue', '')}"
                    raise self._fail(f"{what} failed ({content.get('status')}) {detail}")
                return content

    def idle(self, msg_id: str, what: str) -> str:
        """Wait for the IOPub status idle of ``msg_id``; the stdout written meanwhile."""
        deadline = time.perf_counter() + self.timeout
        stdout = []
        while True:
            msg = self._get(self.client.iopub_channel, deadline, f"outputs of {what}")
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content.get("name") == "stdout":
                stdout.append(content["text"])
            elif kind == "status" and content.get("execution_state") == "idle":
                return "".join(stdout)

    def settle(self) -> None:
        """Wait until IOPub is connected: kernel_info requests until one's status shows there.

        The client subscribes to IOPub while the kernel starts, and outputs published
        before the subscription is complete are lost.
        """
        deadline = time.perf_counter() + self.timeout
        while True:
            msg_id = self.client.kernel_info()
            self.reply(msg_id, "kernel_info")
            wait = min(time.perf_counter() + 0.2, deadline)
            while True:
                try:
                    msg = self._get(self.client.iopub_channel, wait, "IOPub messages")
                except BenchmarkError:
                    if time.perf_counter() >= deadline:
                        raise
                    break
                state = msg["content"].get("execution_state")
                if msg["parent_header"].get("msg_id") == msg_id and state == "idle":
                    return

    def cell(self, code: str) -> str:
        """Run ``code``: wait for its execute_reply and its status idle; its stdout."""
        msg_id = self.client.execute(code)
        self.reply(msg_id, repr(code))
        return self.idle(msg_id, repr(code))

    def version(self) -> str:
        """``implementation version`` from kernel_info (the ipympi kernel reports ipympi's)."""
        content = self.reply(self.client.kernel_info(), "kernel_info")
        return f"{content.get('implementation')} {content.get('implementation_version')}"

    def stop(self) -> None:
        """Shut the kernel down (killing it if it does not stop) and close the client."""
        shut_down_kernel(self.manager, self.client, self.output)


def time_cells(run: Callable[[str], str], code: str, plan: dict[str, Any]) -> list[float]:
    """Seconds per round trip of ``code`` through ``run``: warm-up, then the timed cells."""
    for _ in range(plan["warmup"]):
        run(code)
    times = []
    for _ in range(plan["cells"]):
        t0 = time.perf_counter()
        run(code)
        times.append(time.perf_counter() - t0)
    return times


def time_rows(run: Callable[[str], str], impl: str, plan: dict[str, Any]) -> dict[str, Any]:
    """The per-cell rows of ``impl``, whose cells ``run`` runs (returning their stdout)."""

    def printed(code: str) -> str:
        out = run(code)
        check_printed(impl, out)
        return out

    rows = {"trivial": time_cells(run, CODE[impl]["trivial"], plan)}
    if "print" in CODE[impl]:
        rows["print"] = time_cells(printed, CODE[impl]["print"], plan)
    return rows


def measure_kernel(impl: str, plan: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Fresh starts of one kernel, then cell round trips in the last one; times in seconds."""
    import zmq
    from jupyter_client.kernelspec import KernelSpecManager

    code = CODE[impl]
    result: dict[str, Any] = {"ready": []}
    context = zmq.Context()
    # Retry the connection to a kernel that is still starting every few ms, not every 100.
    context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
    try:
        with tempfile.TemporaryDirectory(prefix="ipympi-session-bench-") as tmp:
            write_kernel_specs(Path(tmp))
            spec_manager = KernelSpecManager(kernel_dirs=[tmp])
            for start in range(plan["repeat"]):
                t0 = time.perf_counter()
                kernel = Kernel(spec_manager, context, impl, Path(tmp) / f"{start}.log", timeout)
                try:
                    kernel.start()
                    first = kernel.client.execute(code["ready"])
                    kernel.reply(first, repr(code["ready"]))
                    result["ready"].append(time.perf_counter() - t0)
                    if start == plan["repeat"] - 1:
                        # IOPub may have connected after the first cell's outputs: do not wait
                        # for them; later cells wait for their own status idle.
                        kernel.settle()
                        result.update(time_rows(kernel.cell, impl, plan))
                        if impl == "ipympi":
                            result["version"] = f"{kernel.version()}, {RANKS} ranks"
                        elif impl == "ipympi-mpi4py":
                            said = kernel.cell(MPI4PY_VERSION).split("] ", 1)[-1].strip()
                            result["version"] = f"ranks started by mpiexec, {said}"
                        elif impl == "ipympi-hosts":
                            result["version"] = f"--hosts {TWO_HOSTS}"
                        else:
                            result["version"] = f"ipykernel {importlib.metadata.version(impl)}"
                finally:
                    kernel.stop()
    finally:
        context.destroy(linger=0)
    return result


# -- IPython Parallel -----------------------------------------------------------------------


def measure_ipyparallel(plan: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Fresh 4-engine clusters, then ``view.execute`` round trips in the last one."""
    import ipyparallel

    code = CODE["ipyparallel"]
    result: dict[str, Any] = {"ready": [], "version": f"ipyparallel {ipyparallel.__version__}"}
    result["version"] += f", {RANKS} engines"
    for start in range(plan["repeat"]):
        t0 = time.perf_counter()
        cluster = ipyparallel.Cluster(n=RANKS, engine_timeout=max(1, round(timeout)))
        client = None
        try:
            client = cluster.start_and_connect_sync()
            view = client[:]

            def execute(text: str, outputs: bool = True, view: Any = view) -> str:
                # view.execute(text, block=True), with a timeout; then the outputs, as %%px.
                pending = view.execute(text, block=False)
                pending.get(timeout=timeout)
                if outputs and not pending.wait_for_output(timeout):
                    raise BenchmarkError(f"no outputs of {text!r} within {timeout:g} s")
                return "".join(pending.stdout)

            execute(code["ready"], outputs=False)
            result["ready"].append(time.perf_counter() - t0)
            if start == plan["repeat"] - 1:
                result.update(time_rows(execute, "ipyparallel", plan))
        finally:
            try:
                if client is not None:
                    client.close()
            finally:
                cluster.stop_cluster_sync()
    return result


def measure_ipp_api(plan: dict[str, Any], timeout: float, no_ipp: str | None) -> tuple[dict, dict]:
    """The columns of ``_ipp_api``'s table that can run here; why the others cannot
    (``no_ipp``: the reason to leave out IPython Parallel's columns)."""
    results, notes = {}, {}
    for column, title in _ipp_api.COLUMNS.items():
        why = no_ipp if no_ipp and column != "ipympi" else _ipp_api.missing(column)
        if why is None:
            announce(SCRIPT, title)
            try:
                results[column] = _ipp_api.measure(column, plan, timeout)
            except Exception as exc:
                why = f"error: {exc!r}"
                print(f"{SCRIPT}: {title} failed: {exc!r}", file=sys.stderr, flush=True)
        if why is not None:
            notes[column] = why
    return results, notes


# -- table ----------------------------------------------------------------------------------


def summarize(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row and system: min / median in the row's unit; ``None`` if it did not run."""
    table = []
    for key, label, unit in ROWS:
        if key.endswith(("_mpi4py", "_hosts")) and not results.get("ipympi", {}).get(key):
            continue  # the mpi4py backend (or a session on 2 hosts) was not measured
        entry: dict[str, Any] = {"name": key, "label": label, "unit": unit}
        for impl in IMPLS:
            times = results.get(impl, {}).get(key)
            if not times:
                entry[impl] = None
                continue
            scale = SCALE[unit]
            entry[impl] = {"min": min(times) * scale, "median": statistics.median(times) * scale}
        if entry["ipympi"] and entry["ipykernel"]:
            entry["ipympi/ipykernel"] = entry["ipympi"]["median"] / entry["ipykernel"]["median"]
        else:
            entry["ipympi/ipykernel"] = None
        table.append(entry)
    return table


def render(
    plan: dict[str, Any],
    table: list[dict[str, Any]],
    results: dict[str, dict[str, Any]],
    errors: dict[str, str],
    skipped: str | None,
    mpi4py_note: str | None,
) -> str:
    """The printed table, with a header and footnotes."""
    versions = []
    for impl in IMPLS:
        version = results.get(impl, {}).get("version")
        versions.append(version or f"{TITLES[impl]}: {'error' if impl in errors else 'n/a'}")
    lines = [
        f"Session start-up and cell round trips, {RANKS} ranks: min / median ({machine()})",
        " | ".join(versions),
        f"session ready: {plan['repeat']} fresh starts each; cells: {plan['cells']} timed"
        f" after {plan['warmup']} warm-up",
        "",
    ]
    header = f"{'':<{LABEL_WIDTH}}" + "".join(f"{TITLES[i]:>{VALUE_WIDTH}}" for i in IMPLS)
    lines.append(header + f"{'ipympi/ipykernel':>{RATIO_WIDTH}}")
    for entry in table:
        line = f"{entry['label']:<{LABEL_WIDTH}}"
        for impl in IMPLS:
            text = "error" if impl in errors else cell(entry[impl], entry["unit"])
            line += f"{text:>{VALUE_WIDTH}}"
        lines.append(line + f"{ratio(entry['ipympi/ipykernel']):>{RATIO_WIDTH}}")
    lines += [
        "",
        "session ready: kernel (or cluster) start to the first cell done; cells: request to",
        "  reply and all outputs; ratio = ipympi median / ipykernel median, lower is better",
        TARGETS,
    ]
    if results.get("ipympi", {}).get("hosts"):
        lines.append(f"on 2 hosts: the ipympi kernel with {results['ipympi']['hosts']} (tcp)")
    if results.get("ipympi", {}).get("mpi4py"):
        said = results["ipympi"]["mpi4py"]
        lines.append(f"on mpi4py: the ipympi kernel with IPYMPI_BACKEND=mpi4py ({said})")
    elif mpi4py_note:
        lines.append(f"on mpi4py: n/a ({mpi4py_note})")
    for impl in IMPLS:
        if impl in errors:
            lines.append(f"{TITLES[impl]}: error ({errors[impl].splitlines()[0]})")
    if skipped:
        lines.append(f"{TITLES['ipyparallel']}: n/a ({skipped})")
    return "\n".join(lines)


def write_document(
    path: str,
    plan: dict[str, Any],
    skipped: str | None,
    errors: dict[str, str],
    results: dict[str, Any],
    table: list[dict[str, Any]],
) -> None:
    """Write the plan, the machine, every time (seconds) and the table to ``path``."""
    document = {
        "plan": plan,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "ipyparallel_skipped": skipped,
        "errors": errors,
        "results": results,
        "table": table,
    }
    Path(path).write_text(json.dumps(document, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Measure every system, print the table, optionally write JSON."""
    args = parse_arguments(argv)
    plan = {
        "ranks": RANKS,
        "repeat": args.repeat,
        "cells": args.cells,
        "warmup": args.warmup,
        "timeout": args.timeout,
        "code": CODE,
    }
    skipped = "--no-ipyparallel" if args.no_ipyparallel else ipyparallel_missing()
    mpi4py_note = "--no-mpi4py" if args.no_mpi4py else mpi4py_backend_missing()
    impls = [impl for impl in IMPLS if impl != "ipyparallel" or skipped is None]
    errors: dict[str, str] = {}

    def run_all() -> dict[str, Any]:
        results = {}
        for impl in impls:
            announce(SCRIPT, TITLES[impl])
            try:
                if impl == "ipyparallel":
                    results[impl] = measure_ipyparallel(plan, args.timeout)
                else:
                    results[impl] = measure_kernel(impl, plan, args.timeout)
            except Exception as exc:
                reason = str(exc) if isinstance(exc, BenchmarkError) else repr(exc)
                errors[impl] = reason
                print(f"{SCRIPT}: {TITLES[impl]} failed: {reason}", file=sys.stderr, flush=True)
        variants = [("hosts", "on 2 hosts")]
        variants += [("mpi4py", "on mpi4py")] if mpi4py_note is None else []
        for variant, title in variants if "ipympi" in results else ():
            announce(SCRIPT, f"ipympi {title}")
            try:
                timed = measure_kernel(f"ipympi-{variant}", plan, args.timeout)
            except Exception as exc:
                reason = str(exc) if isinstance(exc, BenchmarkError) else repr(exc)
                errors["ipympi"] = f"{title}: {reason}"
                print(f"{SCRIPT}: ipympi {title} failed: {reason}", file=sys.stderr, flush=True)
            else:
                for key in MPI4PY_ROWS:
                    results["ipympi"][f"{key}_{variant}"] = timed[key]
                results["ipympi"][variant] = timed["version"]
        if not args.no_ipp_api:
            results["ipp_api"], results["ipp_api_notes"] = measure_ipp_api(
                plan, args.timeout, "--no-ipyparallel" if args.no_ipyparallel else None
            )
        return results

    status, results = run_jobs(SCRIPT, run_all)
    if status:
        return status
    table = summarize(results)
    print(render(plan, table, results, errors, skipped, mpi4py_note), flush=True)
    if "ipp_api" in results:
        print("\n" + _ipp_api.render(results["ipp_api"], results["ipp_api_notes"]), flush=True)
    if args.json:
        write_document(args.json, plan, skipped, errors, results, table)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
