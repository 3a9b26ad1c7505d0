"""A real sshd on 127.0.0.1 with keys made for the test: the remote worker's
transport, run as the user's would be."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from support.tiers import CLUSTER, starts

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@starts(CLUSTER)
class Sshd:
    def __init__(self, folder: Path):
        self.folder, self.port = folder, free_port()
        keygen(folder / "host_key")
        keygen(folder / "user_key")
        (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
        (folder / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {(folder / 'host_key.pub').read_text()}")
        (folder / "sshd_config").write_text(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {folder}/host_key
PidFile {folder}/sshd.pid
AuthorizedKeysFile {folder}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
LogLevel ERROR
""")
        os.makedirs("/run/sshd", exist_ok=True)
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(folder / "sshd_config")], stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError("sshd did not start")

    def command(self, key: str = "user_key", known_hosts: str = "known_hosts") -> str:
        remote_cache = self.folder / "remote-cache"
        return (
            f"ssh -p {self.port} -i {self.folder / key} -o IdentitiesOnly=yes "
            f"-o UserKnownHostsFile={self.folder / known_hosts} -o StrictHostKeyChecking=yes 127.0.0.1 "
            f"{sys.executable} -m vmem_lsp worker --cache-dir {remote_cache}"
        )

    def kill(self) -> None:
        """sshd and every session it forked (and what they run): the connection
        is gone mid-request."""
        for pid in [*descendants(self.process.pid), self.process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found
