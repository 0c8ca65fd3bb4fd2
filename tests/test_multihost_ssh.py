"""A job on two "hosts" started through a real ssh server (skipped without OpenSSH).

The test starts its own sshd on loopback addresses, with its own host key and
an authorized key made for the test, and runs ``ipympi.run --hosts ...
--launcher ssh`` through it: the agents are started by ssh exactly as on a
cluster (a login environment, the command through the remote shell, the key
on stdin). ``.ci/run`` installs OpenSSH where it can.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
TOOLS = (shutil.which("ssh"), shutil.which("ssh-keygen"), SSHD)

pytestmark = pytest.mark.skipif(
    not all(TOOLS) or not sys.platform.startswith("linux"), reason="OpenSSH is not installed"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def ssh_command(tmp_path: Path) -> Iterator[str]:
    """An sshd on 127.0.0.2 and 127.0.0.3; yields the ssh command that logs in to it."""
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    for name in ("host", "user"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True
        )
    (keys / "authorized_keys").write_text((keys / "user.pub").read_text())
    port = _free_port()
    config = keys / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"ListenAddress 127.0.0.2:{port}",
                f"ListenAddress 127.0.0.3:{port}",
                f"HostKey {keys / 'host'}",
                f"AuthorizedKeysFile {keys / 'authorized_keys'}",
                f"PidFile {keys / 'sshd.pid'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "PermitRootLogin prohibit-password",
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    assert SSHD is not None
    server = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    ssh = (
        f"ssh -p {port} -i {keys / 'user'} -o StrictHostKeyChecking=no "
        "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5"
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            probe = subprocess.run(
                [*ssh.split(), "127.0.0.2", "true"], capture_output=True, timeout=15, check=False
            )
            if probe.returncode == 0:
                break
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"sshd did not start here: {probe.stderr.decode()[-300:]}")
            time.sleep(0.2)
        yield ssh
    finally:
        server.terminate()
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


@pytest.mark.timeout(90)
def test_a_job_starts_on_two_hosts_through_ssh(run_mpi, ssh_command: str) -> None:
    body = """
    import os
    from ipympi.mpi.process import PROCESS
    assert os.environ.get("SSH_CONNECTION"), "not started through ssh"
    assert os.environ["MY_SETTING"] == "forwarded"
    host = PROCESS.host_name()
    assert PROCESS.engine.transport.tcp.endpoint.startswith(f"tcp://{host}:")
    total = comm.allreduce(rank)
    big = np.full(200_000, rank, dtype=np.int64)
    out = np.empty_like(big)
    comm.Sendrecv(big, dest=nxt, recvbuf=out, source=prv)
    assert total == sum(range(size)) and out[0] == prv
    print(f"rank {rank} on {host}", flush=True)
    """
    proc = run_mpi(
        4,
        mpi_program(MPI_PRELUDE, body),
        timeout=60,
        launcher_args=(
            "--hosts",
            "127.0.0.2:2,127.0.0.3:2",
            "--launcher",
            "ssh",
            "--launcher-exec",
            ssh_command,
        ),
        env={"MY_SETTING": "forwarded"},
    )
    assert_ok(proc, 4)
    hosts = sorted(line for line in proc.stdout.splitlines() if " on 127." in line)
    assert hosts == [
        "rank 0 on 127.0.0.2",
        "rank 1 on 127.0.0.2",
        "rank 2 on 127.0.0.3",
        "rank 3 on 127.0.0.3",
    ]
