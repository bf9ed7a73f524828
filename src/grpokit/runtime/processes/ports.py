"""Ports no other job on this node holds, chosen so that jobs starting together never collide.

Random ports collide when many jobs start at once (NeMo-Skills#1484) and two ``ray start --head``
on one node fight over 6379 (ray#10154). Here every reservation of one user's jobs goes through one
node-local lock file in the user's private folder (:mod:`grpokit.runtime.processes.node_state`): under the
lock, ports held by live reservations are skipped and each candidate is bind-tested; the
reservation (owner pid and ports) is written before the lock is released, and it lapses when its
owner process dies. Other users' jobs keep their own registries, which no user can read or change
for another: their ports are proven taken by the bind test alone (a port another user reserved but
has not bound yet can still be chosen; Ray's start then fails on it and is tried again with fresh
ports, :func:`grpokit.runtime.processes.ray_cluster.start_cluster`).
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

from grpokit.runtime.processes import node_state

#: The registry file when set (``GRPOKIT_PORT_REGISTRY``, tests); else ``ports.json`` in this user's
#: private node state folder (:func:`registry_path`).
REGISTRY: Path | None = Path(os.environ["GRPOKIT_PORT_REGISTRY"]) if os.environ.get("GRPOKIT_PORT_REGISTRY") else None


def registry_path() -> Path:
    """This user's registry on this node (its folder created and checked private on first use).

    Raises:
        node_state.NodeStateError: the folder is not private (another user's, a symlink).
    """
    return REGISTRY if REGISTRY is not None else node_state.state_dir() / "ports.json"


def _ephemeral_low(default: int = 32768) -> int:
    """First port of the kernel's ephemeral range (``net.ipv4.ip_local_port_range``)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


#: Reserved ports come from [LOW, HIGH): below the kernel's ephemeral range, so that no port the
#: kernel hands out for ``bind(0)`` or an outgoing connection (Ray's helper processes, verl's torch
#: rendezvous, any client) can ever take a reserved one between reservation and use.
LOW = int(os.environ.get("GRPOKIT_PORT_LOW", 15000))
HIGH = int(os.environ.get("GRPOKIT_PORT_HIGH", min(_ephemeral_low(), 65536)))


@contextlib.contextmanager
def _locked(path: Path):
    """Hold ``<registry>.lock`` (created 0600, this user's) while the registry is read and written."""
    fd = node_state.private_file(path.with_suffix(".lock"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _free(port: int, host: str) -> bool:
    """Whether ``port`` can be bound on ``host`` and on all interfaces (Ray's gRPC servers bind
    0.0.0.0 whatever the node address, so a listener on any address counts as taken)."""
    for addr in dict.fromkeys((host, "0.0.0.0")):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((addr, port))
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
    registry = registry_path()
    with _locked(registry):
        data = _live_reservations(_read(registry))
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
            start = _find_block(contiguous, ok, rng.randrange(LOW, max(LOW + 1, HIGH - contiguous + 1)), host)
            block = list(range(start, start + contiguous))
        data[f"{owner}-{len(data)}-{rng.random():.6f}"] = {"pid": owner, "ports": chosen + block}
        _write(registry, data)
    return chosen + ([block[0]] if block else [])


def _find_block(size: int, ok, origin: int, host: str) -> int:
    """First port of ``size`` consecutive ports that all pass ``ok``, scanning ``[LOW, HIGH)`` once
    from ``origin`` (random, so that jobs spread out) and wrapping round.

    Many jobs on one host fragment the range (each holds single ports and a block): a scan finds
    any gap that fits, where random probes miss the few that are left. Each port is tested about once;
    a port that fails moves the candidate start past it.

    Raises:
        RuntimeError: no gap of ``size`` free ports; says the largest gap found.
    """
    largest = 0
    for lo, hi in ((origin, HIGH), (LOW, min(origin + size - 1, HIGH))):
        run_start = lo
        for port in range(lo, hi):
            if not ok(port):
                run_start = port + 1
                continue
            largest = max(largest, port - run_start + 1)
            if port - run_start + 1 == size:
                return run_start
    raise RuntimeError(
        f"no block of {size} free ports in [{LOW}, {HIGH}) on {host}: the largest free gap has {largest} "
        "(many jobs on this node); set runtime.ray_worker_ports lower, or ask for a node with fewer jobs"
    )


def _read(registry: Path) -> dict:
    """The registry (caller holds the lock); an unreadable one counts as empty (it is rebuilt)."""
    try:
        data = json.loads(registry.read_text() or "{}")
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(registry: Path, data: dict) -> None:
    """Replace the registry atomically (caller holds the lock)."""
    tmp = registry.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, registry)


def reserved() -> dict[int, list[int]]:
    """``{owner pid: [ports]}`` of the live reservations on this node (blocks expanded)."""
    registry = registry_path()
    with _locked(registry):
        out: dict[int, list[int]] = {}
        for v in _live_reservations(_read(registry)).values():
            out.setdefault(int(v["pid"]), []).extend(v["ports"])
    return out


def release_ports(owner: int | None = None) -> None:
    """Drop the reservations of ``owner`` (default: this process) before it exits."""
    owner = owner or os.getpid()
    registry = registry_path()
    with _locked(registry):
        if not registry.exists():
            return
        _write(registry, {k: v for k, v in _live_reservations(_read(registry)).items() if int(v["pid"]) != owner})
