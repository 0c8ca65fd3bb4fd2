"""The ``ipympi`` kernel over the Jupyter messaging protocol, as a notebook sees it.

A real kernel is started from its installed spec with three ranks
(``IPYMPI_NP=3``) and driven by a ``jupyter_client`` client. For each kind of
cell the tests check every IOPub message the kernel sends in answer, not just
the text: the labels (``[stdout:R]``, ``Out[R:n]:``, ``[output:R]``,
``[R:execute]``), the ``ipympi`` metadata naming the ranks, that identical
output of several ranks is collapsed, and that nothing is lost, duplicated or
reordered within a rank. Then the controller's magics (``%%local``,
``%mpi``, ``%%px`` options, ``%pxresult``), the ways a cell ends early
(``--timeout``, an interrupt while ranks are blocked in MPI), the progress
line, completion and inspection in the ranks' namespace, and the life cycle:
no supervisor or engine may outlive its session, however the kernel ends.

Most tests share one kernel per module (starting one costs about a second);
those that restart or kill it get their own.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    error_text,
    execute_headers,
    kernel_env,
    kernel_specs_installed,
    outputs,
    session_processes,
    stream_text,
    wait_gone,
)

from ipympi.notebook.controller.render import strip_ansi

NP = 3
RANKS = list(range(NP))
KERNEL = "ipympi"
REPORT_WITHIN = 5.0  # seconds for an interrupted cell to reply (about one when idle)
GONE_WITHIN = 10.0  # seconds for a session's processes to exit


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.fixture(scope="module")
def kernel(kernel_specs: Path) -> Iterator[KernelSession]:
    """One ipympi kernel of three ranks, shared by the module's non-destructive tests."""
    with KernelSession(KERNEL, kernel_env(np=NP)) as k:
        k.ok("None", timeout=60)  # the first cell waits for the ranks to start
        yield k


@pytest.fixture
def fresh_kernel(kernel_specs: Path) -> Iterator[KernelSession]:
    """A kernel of its own, for tests that restart, stop or kill it."""
    with KernelSession(KERNEL, kernel_env(np=NP)) as k:
        k.ok("None", timeout=60)
        yield k


@pytest.fixture
def waiting_kernel(kernel: KernelSession) -> Iterator[KernelSession]:
    """The shared kernel with the stuck-cell rule off (``on_error=wait``).

    By default a cell in which no rank can progress is stopped within about a
    second (a DeadlockError); a test of the interrupt needs the ranks to stay
    blocked until it comes.
    """
    kernel.ok("%mpi config on_error=wait")
    try:
        yield kernel
    finally:
        kernel.ok("%mpi config on_error=interrupt")


# -- helpers ------------------------------------------------------------------------------
def kinds(messages: list[dict]) -> list[str]:
    return [m["msg_type"] for m in messages]


def ipympi_meta(message: dict) -> dict:
    return message["metadata"].get("ipympi", {})


def display_text(message: dict) -> str:
    """The text of a label: one line of stdout, coloured, marked as a label in metadata."""
    assert message["msg_type"] == "stream", message
    assert message["content"]["name"] == "stdout", message
    assert ipympi_meta(message)["label"] is True, message
    return strip_ansi(message["content"]["text"]).rstrip("\n")


def count_of(reply: dict) -> int:
    return reply["content"]["execution_count"]


def is_progress(message: dict) -> bool:
    """A message of the progress line a cell shows after 2 s (a slow machine shows it too)."""
    metadata = message["content"].get("metadata") or {}
    return bool(metadata.get("ipympi", {}).get("progress"))


def check_frame(
    code: str, messages: list[dict], count: int | None = None, progress: bool = False
) -> list[dict]:
    """``messages`` start busy + execute_input and end idle; return what lies between
    (without the progress line, unless ``progress``)."""
    assert kinds(messages[:2]) == ["status", "execute_input"], kinds(messages)
    assert messages[0]["content"]["execution_state"] == "busy"
    assert messages[1]["content"]["code"] == code
    if count is not None:
        assert messages[1]["content"]["execution_count"] == count
    assert kinds(messages[-1:]) == ["status"]
    assert messages[-1]["content"]["execution_state"] == "idle"
    inner = messages[2:-1]
    assert "status" not in kinds(inner)
    return inner if progress else [m for m in inner if not is_progress(m)]


def run(
    kernel: KernelSession, code: str, timeout: float = 30.0, progress: bool = False
) -> tuple[dict, list[dict]]:
    """Run a cell that must succeed; its reply and its output messages (frame checked;
    the progress line only with ``progress``)."""
    reply, messages = kernel.execute(code, timeout)
    content = reply["content"]
    assert content["status"] == "ok", (code, "\n".join(error_text(reply)))
    return reply, check_frame(code, messages, count_of(reply), progress)


def run_failing(kernel: KernelSession, code: str, timeout: float = 30.0) -> tuple[dict, dict]:
    """Run a cell that must fail; its reply and its one ``error`` message."""
    reply, messages = kernel.execute(code, timeout)
    assert reply["content"]["status"] == "error"
    inner = check_frame(code, messages)
    errors = [m for m in inner if m["msg_type"] == "error"]
    assert len(errors) == 1, kinds(inner)
    error = errors[0]
    assert reply["content"]["ename"] == error["content"]["ename"]
    assert reply["content"]["evalue"] == error["content"]["evalue"]
    return reply, error


def result_pairs(messages: list[dict]) -> list[tuple[str, dict]]:
    """(label text, execute_result message) for each result; no other messages allowed."""
    assert len(messages) % 2 == 0, [(m["msg_type"], m["content"]) for m in messages]
    pairs = []
    for label, result in zip(messages[::2], messages[1::2]):
        assert kinds([label, result]) == ["stream", "execute_result"]
        assert ipympi_meta(label)["label"] is True
        assert ipympi_meta(label)["ranks"] == ipympi_meta(result)["ranks"]
        pairs.append((display_text(label), result))
    return pairs


def rank_pids(kernel: KernelSession) -> list[int]:
    """Each rank's process id, in rank order."""
    kernel.ok("import os as _os\n_pid = _os.getpid()")
    return kernel.value("%mpi pull _pid")


# -- streams ------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_each_rank_prints_one_labelled_line(kernel: KernelSession) -> None:
    code = "print('hello', rank)"
    _, inner = run(kernel, code)
    assert kinds(inner) == ["stream"] * NP
    texts = sorted(m["content"]["text"] for m in inner)
    assert texts == [f"[stdout:{r}] hello {r}\n" for r in RANKS]
    for m in inner:
        assert m["content"]["name"] == "stdout"
        rank = int(m["content"]["text"][len("[stdout:")])
        assert ipympi_meta(m) == {"ranks": [rank]}


@pytest.mark.timeout(60)
def test_many_lines_arrive_all_once_in_order(kernel: KernelSession) -> None:
    code = "for i in range(200):\n    print(f'{rank}:{i}')"
    _, inner = run(kernel, code)
    assert set(kinds(inner)) == {"stream"}
    seen: dict[int, list[int]] = {r: [] for r in RANKS}
    for m in inner:
        assert m["content"]["name"] == "stdout"
        text = m["content"]["text"]
        assert text.endswith("\n")
        for line in text.splitlines():
            match = re.fullmatch(r"\[stdout:(\d)\] (\d):(\d+)", line)
            assert match, line
            label, rank, i = (int(g) for g in match.groups())
            assert label == rank
            assert rank in ipympi_meta(m)["ranks"]
            seen[rank].append(i)
    for rank in RANKS:
        assert seen[rank] == list(range(200)), f"rank {rank}"


@pytest.mark.timeout(60)
def test_identical_lines_collapse(kernel: KernelSession) -> None:
    _, inner = run(kernel, "print('hi')")
    assert kinds(inner) == ["stream"]
    assert inner[0]["content"] == {"name": "stdout", "text": "[stdout:0-2] hi\n"}
    assert ipympi_meta(inner[0]) == {"ranks": RANKS}


@pytest.mark.timeout(60)
def test_stderr_is_labelled(kernel: KernelSession) -> None:
    _, inner = run(kernel, "import sys\nprint('err', rank, file=sys.stderr)")
    assert kinds(inner) == ["stream"] * NP
    assert {m["content"]["name"] for m in inner} == {"stderr"}
    assert sorted(m["content"]["text"] for m in inner) == [f"[stderr:{r}] err {r}\n" for r in RANKS]
    assert stream_text(inner, "stdout") == ""


@pytest.mark.timeout(60)
def test_mpi4py_in_a_cell_is_ipympi(kernel: KernelSession) -> None:
    """Notebooks written for mpi4py run unchanged: its name gives the session's MPI."""
    code = "from mpi4py import MPI as M\nprint(M is MPI, M.COMM_WORLD.allreduce(1))"
    _, inner = run(kernel, code)
    assert [m["content"]["text"] for m in inner] == [f"[stdout:0-{NP - 1}] True {NP}\n"]
    assert kernel.value("%%local\nimport sys\n'mpi4py.MPI' in sys.modules") is False


# -- results and displays -----------------------------------------------------------------
@pytest.mark.timeout(60)
def test_each_rank_result_follows_its_label(kernel: KernelSession) -> None:
    reply, inner = run(kernel, "rank * 2")
    n = count_of(reply)
    pairs = result_pairs(inner)
    assert sorted(label for label, _ in pairs) == [f"Out[{r}:{n}]:" for r in RANKS]
    for label, result in pairs:
        rank = int(label[len("Out[") : label.index(":")])
        content = result["content"]
        assert content["data"]["text/plain"] == str(rank * 2)
        assert "Out[" not in content["data"]["text/plain"]
        assert content["execution_count"] == n
        assert ipympi_meta(result) == {"rank": rank, "ranks": [rank]}
        assert content["metadata"]["ipympi"]["rank"] == rank


@pytest.mark.timeout(60)
def test_identical_results_collapse(kernel: KernelSession) -> None:
    reply, inner = run(kernel, "size")
    n = count_of(reply)
    [(label, result)] = result_pairs(inner)
    assert label == f"Out[0-2:{n}]:"
    assert result["content"]["data"] == {"text/plain": "3"}
    assert ipympi_meta(result)["ranks"] == RANKS


@pytest.mark.timeout(60)
def test_rich_display_carries_its_rank(kernel: KernelSession) -> None:
    code = "from IPython.display import HTML, display\ndisplay(HTML(f'<b>{rank}</b>'))"
    _, inner = run(kernel, code)
    assert kinds(inner) == ["stream", "display_data"] * NP
    seen = []
    for label, shown in zip(inner[::2], inner[1::2]):
        rank = ipympi_meta(shown)["rank"]
        assert display_text(label) == f"[output:{rank}]"
        assert ipympi_meta(label) == {"label": True, "ranks": [rank]}
        assert shown["content"]["data"]["text/html"] == f"<b>{rank}</b>"
        seen.append(rank)
    assert sorted(seen) == RANKS


@pytest.mark.timeout(60)
def test_matplotlib_figure_from_one_rank(kernel: KernelSession) -> None:
    pytest.importorskip("matplotlib")
    code = (
        "%matplotlib inline\n"
        "import matplotlib.pyplot as plt\n"
        "if rank == 1:\n"
        "    plt.plot([1, 2, 3])\n"
        "    plt.show()"
    )
    _, inner = run(kernel, code, timeout=60)
    assert kinds(inner) == ["stream", "display_data"]
    label, figure = inner
    assert display_text(label) == "[output:1]"
    assert "image/png" in figure["content"]["data"]
    assert ipympi_meta(figure)["rank"] == 1


# -- errors -------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_error_on_one_rank(kernel: KernelSession) -> None:
    reply, error = run_failing(kernel, "if rank == 1:\n    1 / 0")
    content = error["content"]
    assert content["ename"] == "ZeroDivisionError"
    assert any("\x1b[" in line for line in content["traceback"])
    lines = error_text(error)
    assert lines[0].startswith("rank 1 of 3 raised ZeroDivisionError: division by zero")
    assert execute_headers(lines) == ["[1:execute]"]
    assert sum("ZeroDivisionError: division by zero" in line for line in lines[1:]) == 1
    assert reply["content"]["ename"] == "ZeroDivisionError"


@pytest.mark.timeout(60)
def test_identical_errors_collapse(kernel: KernelSession) -> None:
    _, error = run_failing(kernel, "1 / 0")
    lines = error_text(error)
    assert error["content"]["ename"] == "ZeroDivisionError"
    assert lines[0].startswith("all 3 ranks raised ZeroDivisionError")
    assert execute_headers(lines) == ["[0-2:execute]"]
    assert sum("ZeroDivisionError: division by zero" in line for line in lines[1:]) == 1


@pytest.mark.timeout(60)
def test_errors_name_the_notebook_cell(kernel: KernelSession) -> None:
    """A rank's traceback and its "where" name the cell as the notebook numbers it (In [n]).

    Cells the ranks never see (``%%local``, ``%mpi``) still take a number.
    """
    run(kernel, "%%local\nNone")
    reply, error = run_failing(kernel, "x = 1\nif rank == 1:\n    1 / 0")
    n = count_of(reply)
    assert f"Cell In[{n}], line 3" in "\n".join(error_text(error))
    run(kernel, "%%local\nNone")
    code = "%%px --timeout 0.5 -t 0\nimport time\ntime.sleep(10)"
    reply, error = run_failing(kernel, code)
    n = count_of(reply)
    assert reply["content"]["evalue"].endswith(f"at line 2 of cell [{n}]")


@pytest.mark.timeout(60)
def test_output_before_an_error_is_kept(kernel: KernelSession) -> None:
    reply, messages = kernel.execute("print('before', rank)\nraise ValueError(rank)")
    inner = check_frame("print('before', rank)\nraise ValueError(rank)", messages)
    assert kinds(inner) == ["stream"] * NP + ["error"]
    assert sorted(m["content"]["text"] for m in inner[:NP]) == [
        f"[stdout:{r}] before {r}\n" for r in RANKS
    ]
    lines = error_text(inner[-1])
    assert reply["content"]["ename"] == "ValueError"
    assert lines[0].startswith("all 3 ranks raised ValueError")
    assert execute_headers(lines) == ["[0:execute]", "[1:execute]", "[2:execute]"]


# -- the controller's own cells -----------------------------------------------------------
@pytest.mark.timeout(60)
def test_local_cell_runs_in_the_kernel_only(kernel: KernelSession) -> None:
    code = "%%local\nimport os\nprint('here')\nos.getpid()"
    reply, inner = run(kernel, code)
    assert kinds(inner) == ["stream", "execute_result"]
    assert inner[0]["content"] == {"name": "stdout", "text": "here\n"}
    assert inner[0]["metadata"] == {}
    assert inner[1]["content"]["data"]["text/plain"] == str(kernel.pid)
    assert inner[1]["content"]["execution_count"] == count_of(reply)
    # a name defined in the kernel is not defined on the ranks, and the other way round
    run(kernel, "%%local\nonly_in_kernel = 1")
    run(kernel, "only_on_ranks = 1")
    where = kernel.value("%%local\n'only_in_kernel' in dir(), 'only_on_ranks' in dir()")
    assert where == (True, False)
    _, inner = run(kernel, "'only_in_kernel' in dir(), 'only_on_ranks' in dir()")
    [(_, result)] = result_pairs(inner)
    assert result["content"]["data"]["text/plain"] == "(False, True)"


@pytest.mark.timeout(60)
def test_kernel_output_still_precedes_the_reply(kernel: KernelSession) -> None:
    # The kernel's streams skip flushing when they hold nothing; text written in
    # the kernel is still all sent before the cell ends.
    code = (
        "%%local\nimport sys, threading\n"
        "print(type(sys.stdout).__module__)\n"
        "t = threading.Thread(target=print, args=('from a thread',)); t.start(); t.join()\n"
        "sys.stderr.write('late')"
    )
    _, inner = run(kernel, code)
    stdout = "".join(m["content"]["text"] for m in inner if m["content"].get("name") == "stdout")
    stderr = "".join(m["content"]["text"] for m in inner if m["content"].get("name") == "stderr")
    assert stdout == "ipympi.notebook.outstream\nfrom a thread\n"
    assert stderr == "late"


@pytest.mark.timeout(60)
def test_parallel_cells_keep_the_kernels_history_and_events(kernel: KernelSession) -> None:
    # Parallel cells go straight to the ranks; they are still numbered, kept in the
    # kernel's history (as the %%px call they stand for) and seen by its events.
    run(
        kernel,
        "%%local\nseen = []\n"
        "def before(info): seen.append(info.raw_cell)\n"
        "def after(result): seen.append(result.success)\n"
        "get_ipython().events.register('pre_run_cell', before)\n"
        "get_ipython().events.register('post_run_cell', after)",
    )
    first, _ = run(kernel, "history_probe = rank")
    reply, _ = kernel.execute("1 / 0")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "ZeroDivisionError"
    assert count_of(reply) == count_of(first) + 1
    n = count_of(first)
    stored = kernel.value(f"%%local\nIn[{n}], _ih[{n + 1}]")
    assert stored == (
        "get_ipython().run_cell_magic('px', '', 'history_probe = rank\\n')",
        "get_ipython().run_cell_magic('px', '', '1 / 0\\n')",
    )
    seen = kernel.value("%%local\nseen[:5]")
    assert seen == [True, "history_probe = rank", True, "1 / 0", False]
    run(
        kernel,
        "%%local\nget_ipython().events.unregister('pre_run_cell', before)\n"
        "get_ipython().events.unregister('post_run_cell', after)",
    )


@pytest.mark.timeout(60)
def test_parallel_cells_follow_pxconfig(kernel: KernelSession) -> None:
    run(kernel, "%pxconfig --noblock")
    try:
        _, inner = run(kernel, "rank * 2")
        # the controller's pending result, and no rank output until %pxresult
        assert kinds(inner) == ["execute_result"]
        assert "ipympi" not in inner[0]["metadata"]
        _, inner = run(kernel, "%pxresult")
        values = sorted(r["content"]["data"]["text/plain"] for _, r in result_pairs(inner))
        assert values == ["0", "2", "4"]
    finally:
        kernel.execute("%pxconfig --block")


@pytest.mark.timeout(60)
def test_mpi_status_lists_the_ranks(kernel: KernelSession) -> None:
    pids = rank_pids(kernel)
    _, inner = run(kernel, "%mpi status")
    assert kinds(inner) == ["execute_result"]
    data = inner[0]["content"]["data"]
    assert data["text/html"].startswith("<table>")
    caption, head, *rows = data["text/plain"].splitlines()
    assert caption == f"{NP} ranks: builtin backend (ipympi's own MPI), forked by the supervisor"
    assert head.split()[:4] == ["rank", "pid", "host", "state"]
    assert len(rows) == NP
    for rank, (row, pid) in enumerate(zip(rows, pids)):
        words = row.split()
        assert words[:2] == [str(rank), str(pid)]
        assert words[3] == "idle"


@pytest.mark.timeout(60)
def test_push_and_pull(kernel: KernelSession) -> None:
    run(kernel, "%%local\npushed = {'a': [1, 2]}")
    _, inner = run(kernel, "%mpi push pushed")
    assert inner == []
    _, inner = run(kernel, "pushed['a'][1] + rank")
    pairs = result_pairs(inner)
    assert sorted(r["content"]["data"]["text/plain"] for _, r in pairs) == ["2", "3", "4"]
    run(kernel, "pulled = rank ** 2")
    assert kernel.value("%mpi pull pulled") == [0, 1, 4]
    assert kernel.value("%mpi pull pulled -t 1,2") == [1, 4]
    reply, _ = kernel.execute("%mpi pull not_defined_anywhere")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "UsageError"  # one line: what the ranks raised
    assert "raised NameError" in reply["content"]["evalue"]


@pytest.mark.timeout(60)
def test_targets(kernel: KernelSession) -> None:
    _, inner = run(kernel, "%%px -t 0\nprint('only', rank)")
    assert [m["content"]["text"] for m in inner] == ["[stdout:0] only 0\n"]
    _, inner = run(kernel, "%%px -t 1,2\nprint('some')")
    assert [m["content"]["text"] for m in inner] == ["[stdout:1,2] some\n"]
    assert ipympi_meta(inner[0]) == {"ranks": [1, 2]}
    _, inner = run(kernel, "%px rank + 100")
    assert sorted(r["content"]["data"]["text/plain"] for _, r in result_pairs(inner)) == [
        "100",
        "101",
        "102",
    ]


@pytest.mark.timeout(60)
def test_group_by_rank_without_streaming(kernel: KernelSession) -> None:
    # Higher ranks print first; the output still reads rank by rank.
    code = (
        "%%px --group-outputs=rank --no-stream\n"
        "import time\n"
        "time.sleep(0.15 * (2 - rank))\n"
        "print('line', rank)\n"
        "rank"
    )
    reply, inner = run(kernel, code)
    n = count_of(reply)
    assert kinds(inner) == ["stream", "stream", "execute_result"] * NP
    for rank in RANKS:
        stream, label, result = inner[3 * rank : 3 * rank + 3]
        assert stream["content"]["text"] == f"[stdout:{rank}] line {rank}\n"
        assert display_text(label) == f"Out[{rank}:{n}]:"
        assert result["content"]["data"]["text/plain"] == str(rank)


@pytest.mark.timeout(60)
def test_noblock_then_pxresult(kernel: KernelSession) -> None:
    code = "%%px --noblock\nimport time\ntime.sleep(1.5)\nprint('late', rank)\nrank + 10"
    started = time.monotonic()
    _, inner = run(kernel, code)
    assert time.monotonic() - started < 1.5, "--noblock waited for the ranks"
    # only the controller's CellResult, no rank output yet
    assert kinds(inner) == ["execute_result"]
    assert "ipympi" not in inner[0]["metadata"]
    reply, inner = run(kernel, "%pxresult")
    n = count_of(reply)
    printed = [m for m in inner if m["msg_type"] == "stream" and not ipympi_meta(m).get("label")]
    lines = stream_text(printed).splitlines()
    assert sorted(lines) == [f"[stdout:{r}] late {r}" for r in RANKS]
    results = [m for m in inner if m not in printed]
    pairs = result_pairs(results)
    assert sorted(label for label, _ in pairs) == [f"Out[{r}:{n}]:" for r in RANKS]
    assert sorted(r["content"]["data"]["text/plain"] for _, r in pairs) == ["10", "11", "12"]
    reply, _ = kernel.execute("%pxresult")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "UsageError"


@pytest.mark.timeout(60)
def test_silent_execute_publishes_no_result(kernel: KernelSession) -> None:
    before = count_of(run(kernel, "None")[0])
    reply, messages = kernel.execute("silent_var = rank + 1\nsilent_var", silent=True)
    assert reply["content"]["status"] == "ok"
    # a silent request shows no input, no result, no count (as in a stock kernel)
    assert "execute_input" not in kinds(messages)
    assert [m for m in outputs(messages) if m["msg_type"] != "stream"] == [], kinds(messages)
    after, inner = run(kernel, "silent_var")
    assert count_of(after) == before + 1
    assert sorted(r["content"]["data"]["text/plain"] for _, r in result_pairs(inner)) == [
        "1",
        "2",
        "3",
    ]


# -- cells that end early -----------------------------------------------------------------
# rank 0 waits for a message that rank 1 sends only after a long sleep: slow, not stuck
SLOW_SENDER = (
    "%%px --timeout 1\n"
    "import time\n"
    "if rank == 0:\n"
    "    comm.recv(source=1)\n"
    "elif rank == 1:\n"
    "    time.sleep(30)\n"
    "    comm.send('late', dest=0)"
)


@pytest.mark.timeout(60)
def test_timeout_stops_a_blocked_cell(kernel: KernelSession) -> None:
    run(kernel, "kept = rank * 7")
    started = time.monotonic()
    reply, _ = run_failing(kernel, SLOW_SENDER)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 1.0 + REPORT_WITHIN
    assert reply["content"]["ename"] == "TimeoutError"
    evalue = reply["content"]["evalue"]
    assert evalue.startswith("the cell ran longer than --timeout 1 s; rank 0 was stopped in recv(")
    # the ranks' collectives still match; their namespaces are intact
    _, inner = run(kernel, "comm.allreduce(rank)")
    [(_, result)] = result_pairs(inner)
    assert result["content"]["data"]["text/plain"] == "3"
    assert kernel.value("%mpi pull kept") == [0, 7, 14]


@pytest.mark.timeout(60)
def test_timeout_error_says_why_it_ended(kernel: KernelSession) -> None:
    """The traceback (what the notebook shows) names the timeout and where rank 0 waited.

    With one stopped rank its summary line does; here two ranks were stopped
    in different places.
    """
    _, error = run_failing(kernel, SLOW_SENDER)
    summary = error_text(error)[0]
    assert summary.startswith("the cell ran longer than --timeout 1 s; rank 0 was stopped in ")
    assert "--timeout 1 s" in summary
    assert "recv(source=1, tag=ANY_TAG)" in summary


@pytest.mark.timeout(60)
def test_interrupt_ranks_blocked_in_mpi(waiting_kernel: KernelSession) -> None:
    kernel = waiting_kernel
    run(kernel, "survivor = 'still here'")
    code = "if rank == 0:\n    comm.recv(source=1, tag=7)\nelse:\n    comm.Barrier()"
    msg_id = kernel.send(code)
    time.sleep(1.0)
    kernel.km.interrupt_kernel()
    interrupted = time.monotonic()
    reply, messages = kernel.collect(msg_id, timeout=REPORT_WITHIN + 10)
    assert time.monotonic() - interrupted < REPORT_WITHIN
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    inner = check_frame(code, messages, count_of(reply))
    # on_error=wait says that the cell is stuck (if it has noticed yet); the interrupt ends it
    assert kinds(inner) in (["error"], ["stream", "error"]), kinds(inner)
    for notice in inner[:-1]:
        assert notice["content"]["name"] == "stderr"
        text = notice["content"]["text"]
        assert text.startswith("ipympi: deadlock: rank 0 waits in recv(source=1, tag=7)")
        assert "on_error=wait" in text
    text = "\n".join(error_text(inner[-1]))
    assert text.startswith("interrupted: ")
    # (which cell: see test_errors_name_the_notebook_cell)
    assert re.search(r"rank 0 in recv\(source=1, tag=7\) on MPI_COMM_WORLD at line 2 of cell", text)
    # ranks waiting in the same round of the same call are named together ("ranks 1,2")
    assert re.search(r"ranks? (\d+,)*1(,\d+)* in Barrier .* at line 4 of cell", text)
    assert re.search(r"ranks? (\d+,)*2(,\d+)* in Barrier .* at line 4 of cell", text)
    # the ranks' collectives are realigned; their namespaces are intact
    _, inner = run(kernel, "comm.allreduce(rank), survivor")
    [(_, result)] = result_pairs(inner)
    assert result["content"]["data"]["text/plain"] == "(3, 'still here')"


@pytest.mark.timeout(60)
def test_deadlock_is_stopped_and_the_next_cell_works(kernel: KernelSession) -> None:
    code = "if rank == 0:\n    comm.recv(source=1, tag=7)\nelse:\n    comm.Barrier()"
    started = time.monotonic()
    reply, error = run_failing(kernel, code)
    assert time.monotonic() - started < REPORT_WITHIN
    assert reply["content"]["ename"] == "DeadlockError"
    assert "recv(source=1, tag=7)" in "\n".join(error_text(error))
    _, inner = run(kernel, "comm.allreduce(rank)")
    [(_, result)] = result_pairs(inner)
    assert result["content"]["data"]["text/plain"] == "3"


@pytest.mark.timeout(90)
def test_interrupt_while_a_deadlock_is_stopped(kernel: KernelSession) -> None:
    """An interrupt that arrives while the stuck-cell rule stops the ranks changes nothing.

    The rule stops this cell about 0.8 s after it starts; interrupts are sent
    around that moment. Whichever ends the cell (the interrupt or the rule),
    the next cells' collectives must match.
    """
    code = "if rank == 0:\n    comm.recv(source=1, tag=7)\nelse:\n    comm.Barrier()"
    failures = []
    for delay in (0.7, 0.75, 0.8, 0.85, 0.9):
        msg_id = kernel.send(code)
        time.sleep(delay)
        kernel.km.interrupt_kernel()
        reply, _ = kernel.collect(msg_id, timeout=REPORT_WITHIN + 10)
        assert reply["content"]["ename"] in ("KeyboardInterrupt", "DeadlockError")
        for _ in range(2):
            after, _ = kernel.execute("comm.allreduce(rank)")
            if after["content"]["status"] != "ok":
                failures.append((delay, reply["content"]["ename"], error_text(after)[0]))
    assert failures == []


# -- progress -----------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_progress_line_of_a_long_cell(kernel: KernelSession) -> None:
    _, inner = run(kernel, "import time\ntime.sleep(2.5)", progress=True)
    assert kinds(inner)[0] == "display_data"
    assert set(kinds(inner)[1:]) == {"update_display_data"}
    ids = {m["content"]["transient"]["display_id"] for m in inner}
    assert len(ids) == 1
    assert ids.pop().startswith("ipympi-progress-")
    assert inner[0]["content"]["data"]["text/plain"]
    assert inner[-1]["content"]["data"]["text/plain"] == ""  # cleared at the end


@pytest.mark.timeout(60)
def test_short_cell_has_no_progress_line(kernel: KernelSession) -> None:
    _, inner = run(kernel, "import time\ntime.sleep(0.5)", progress=True)
    assert inner == []


# -- completion and inspection ------------------------------------------------------------
@pytest.mark.timeout(60)
def test_completion_of_engine_variables(kernel: KernelSession) -> None:
    run(kernel, "engine_only_var = {'k': 1}")
    assert kernel.value("%%local\n'engine_only_var' in dir()") is False
    reply = kernel.request("complete", "engine_only_v")
    assert reply["status"] == "ok"
    assert "engine_only_var" in reply["matches"]
    assert (reply["cursor_start"], reply["cursor_end"]) == (0, len("engine_only_v"))
    reply = kernel.request("complete", "engine_only_var.")
    assert {"keys", "items", "values"} <= set(reply["matches"])
    reply = kernel.request("complete", "x = engine_only_var.ke")
    assert reply["matches"] == ["keys"]
    assert reply["cursor_end"] == len("x = engine_only_var.ke")


@pytest.mark.timeout(60)
def test_completion_when_jedi_finds_nothing_comes_from_the_namespace(kernel: KernelSession) -> None:
    # IPython drops jedi's failures silently (e.g. its caches being written by another
    # kernel): the engine's own matchers answer then
    run(
        kernel,
        "_jedi = get_ipython().Completer._jedi_matches\n"
        "get_ipython().Completer._jedi_matches = lambda *args, **kwargs: iter([])",
    )
    try:
        reply = kernel.request("complete", "engine_only_v")
        assert "engine_only_var" in reply["matches"]
        assert "zip" in kernel.request("complete", "zi")["matches"]
        assert kernel.value("get_ipython().Completer.use_jedi") is True  # as it was
    finally:
        run(kernel, "get_ipython().Completer._jedi_matches = _jedi")


@pytest.mark.timeout(60)
def test_inspect_engine_variable(kernel: KernelSession) -> None:
    run(kernel, "engine_only_list = [1, 2, 3]")
    reply = kernel.request("inspect", "engine_only_list")
    assert reply["status"] == "ok"
    assert reply["found"] is True
    assert "list" in reply["data"]["text/plain"]
    reply = kernel.request("inspect", "no_such_name_anywhere")
    assert reply["status"] == "ok"
    assert reply["found"] is False


# -- life cycle ---------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_what_ranks_write_at_start_up_goes_to_the_kernel_log(
    kernel_specs: Path, tmp_path: Path
) -> None:
    # IPython warns at every shell's start when $VIRTUAL_ENV names another
    # virtualenv than the one it runs in: each rank's start-up writes that warning.
    log = tmp_path / "kernel.log"
    env = kernel_env(np=2, VIRTUAL_ENV=str(tmp_path / "another-venv"))
    with log.open("w") as stderr, KernelSession(KERNEL, env, stderr=stderr) as kernel:
        cells = [run(kernel, "None", timeout=60)[1], run(kernel, "%mpi restart", timeout=60)[1]]
        cells += [run(kernel, "rank")[1] for _ in range(3)]
        assert [
            m["content"]
            for cell in cells
            for m in cell
            if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"
        ] == []
    text = log.read_text()
    for rank in (0, 1):
        # two worlds' ranks: the first one's and the restarted one's
        assert text.count(f"[stderr:{rank}] ") == 2, text
    assert "virtualenv" in text


@pytest.mark.timeout(60)
def test_mpi_restart_with_fewer_ranks(fresh_kernel: KernelSession) -> None:
    kernel = fresh_kernel
    old = rank_pids(kernel)
    _, inner = run(kernel, "%mpi restart -n 2", timeout=60)
    assert re.fullmatch(r"MPI session restarted: 2 ranks ready in [0-9.]+ s\n", stream_text(inner))
    reply, inner = run(kernel, "size")
    [(label, result)] = result_pairs(inner)
    assert label == f"Out[0,1:{count_of(reply)}]:"
    assert result["content"]["data"]["text/plain"] == "2"
    assert wait_gone(old, GONE_WITHIN) == []
    new = rank_pids(kernel)
    assert len(new) == 2
    assert not set(new) & set(old)


@pytest.mark.timeout(90)
def test_ranks_get_the_environment_the_kernel_sets(fresh_kernel: KernelSession) -> None:
    """The engines' supervisor starts before ipykernel sets PAGER, CLICOLOR, ...: the
    ranks get those variables all the same, also in a world started later."""
    kernel = fresh_kernel
    names = ("PAGER", "GIT_PAGER", "CLICOLOR", "TERM")
    grab = f"import os as _os\n_env = [_os.environ.get(name) for name in {names!r}]"
    kernel.ok(f"%%local\n{grab}")
    expected = kernel.value("%%local\n_env")
    assert expected[0] == "cat", expected  # set by ipykernel after the early start
    for step in ("None", "%mpi restart"):
        kernel.ok(step, timeout=60)
        kernel.ok(grab)
        assert kernel.value("%mpi pull _env") == [expected] * NP


@pytest.mark.timeout(90)
def test_kernel_restart_leaves_no_old_engines(fresh_kernel: KernelSession) -> None:
    kernel = fresh_kernel
    run(kernel, "before_restart = 1")
    supervisors, engines = session_processes(kernel.pid)
    assert len(supervisors) == 1
    assert sorted(engines) == sorted(rank_pids(kernel))
    old_kernel = kernel.pid
    kernel.km.restart_kernel(now=False)
    kernel.kc.wait_for_ready(timeout=60)
    assert wait_gone([old_kernel, *supervisors, *engines], GONE_WITHIN) == []
    kernel.drain_iopub()
    assert kernel.value("%%local\nimport os\nos.getpid()", timeout=60) == kernel.pid
    _, inner = run(kernel, "size, 'before_restart' in dir()", timeout=60)
    [(_, result)] = result_pairs(inner)
    assert result["content"]["data"]["text/plain"] == "(3, False)"
    new_supervisors, new_engines = session_processes(kernel.pid)
    assert len(new_supervisors) == 1
    assert len(new_engines) == NP
    assert not set(new_engines) & set(engines)


@pytest.mark.timeout(60)
def test_shutdown_leaves_no_process(fresh_kernel: KernelSession) -> None:
    kernel = fresh_kernel
    supervisors, engines = session_processes(kernel.pid)
    assert len(supervisors) == 1
    assert len(engines) == NP
    pid = kernel.pid
    kernel.shutdown()
    assert wait_gone([pid, *supervisors, *engines], GONE_WITHIN) == []


@pytest.mark.timeout(60)
def test_killed_kernel_leaves_no_process(fresh_kernel: KernelSession) -> None:
    kernel = fresh_kernel
    supervisors, engines = session_processes(kernel.pid)
    assert len(supervisors) == 1
    assert len(engines) == NP
    os.kill(kernel.pid, signal.SIGKILL)
    assert wait_gone([kernel.pid, *supervisors, *engines], GONE_WITHIN) == []
