"""Ports no other job on this node holds, chosen so that jobs starting together never collide.

Random ports collide when many jobs start at once (NeMo-Skills#1484) and two ``ray start --head``
on one node fight over 6379 (ray#10154). Here every reservation goes through one node-local lock
file: under the lock, ports held by live reservations are skipped and each candidate is
bind-tested; the reservation (owner pid and ports) is written before the lock is released, and it
lapses when its owner process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import socket
from pathlib import Path

import psutil

#: One registry per node, shared by all users' jobs (world-writable /tmp path, sticky bit).
REGISTRY = Path(os.environ.get("GRPOKIT_PORT_REGISTRY", "/tmp/grpokit-ports.json"))
LOW, HIGH = 20000, 60000


@contextlib.contextmanager
def _locked(path: Path):
    lock = path.with_suffix(".lock")
    with open(lock, "a+") as fh:
        with contextlib.suppress(PermissionError):
            os.chmod(lock, 0o666)
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _free(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _live_reservations(data: dict) -> dict:
    return {k: v for k, v in data.items() if psutil.pid_exists(int(v["pid"]))}


def reserve_ports(count: int, *, contiguous: int = 0, host: str = "0.0.0.0", owner: int | None = None) -> list[int]:
    """Reserve ``count`` single ports plus, if ``contiguous`` > 0, one block of that many ports.

    Args:
        count: single ports wanted.
        contiguous: size of one extra block of consecutive ports (Ray's worker port range),
            returned as its first port after the ``count`` singles.
        host: the address the services will bind (bind-tested there).
        owner: pid whose life holds the reservation (default: this process).

    Returns:
        ``count`` ports, then the block's first port when ``contiguous`` > 0.

    Raises:
        RuntimeError: no free ports were found in ``[LOW, HIGH)``.
    """
    owner = owner or os.getpid()
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))
    with _locked(REGISTRY):
        data = {}
        if REGISTRY.exists():
            with contextlib.suppress(json.JSONDecodeError):
                data = json.loads(REGISTRY.read_text() or "{}")
        data = _live_reservations(data)
        held = {p for v in data.values() for p in v["ports"]}
        chosen: list[int] = []

        def ok(port: int) -> bool:
            return port not in held and port not in chosen and _free(port, host)

        for _ in range(count):
            for _try in range(2000):
                port = rng.randrange(LOW, HIGH)
                if ok(port):
                    chosen.append(port)
                    break
            else:
                raise RuntimeError(f"no free port in [{LOW}, {HIGH}) on {host}")
        block: list[int] = []
        if contiguous:
            for _try in range(500):
                start = rng.randrange(LOW, HIGH - contiguous)
                candidate = list(range(start, start + contiguous))
                if all(ok(p) for p in candidate):
                    block = candidate
                    break
            else:
                raise RuntimeError(f"no block of {contiguous} free ports in [{LOW}, {HIGH})")
        data[f"{owner}-{len(data)}-{rng.random():.6f}"] = {"pid": owner, "ports": chosen + block}
        tmp = REGISTRY.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, REGISTRY)
        with contextlib.suppress(PermissionError):
            os.chmod(REGISTRY, 0o666)
    return chosen + ([block[0]] if block else [])


def release_ports(owner: int | None = None) -> None:
    """Drop the reservations of ``owner`` (default: this process) before it exits."""
    owner = owner or os.getpid()
    with _locked(REGISTRY):
        if not REGISTRY.exists():
            return
        data = json.loads(REGISTRY.read_text() or "{}")
        data = {k: v for k, v in _live_reservations(data).items() if int(v["pid"]) != owner}
        tmp = REGISTRY.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, REGISTRY)
