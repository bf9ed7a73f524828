"""The allocation's nodes: their names, the address others reach them on, a step on each."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

from grpokit.slurm import runner
from grpokit.slurm.task import JobEnv


def node_count(nodelist: str | None) -> int | None:
    """How many nodes a Slurm host list names, without asking Slurm: ``node1`` 1, ``node[1-3,7]``
    4, ``gpu[01-02],cpu5`` 3, ``rack[1-2]-n[1-4]`` 8 (each bracket's count multiplied).

    None for an empty list or one this reading does not understand (unbalanced brackets, a range
    running backwards)."""
    if not nodelist or not nodelist.strip():
        return None
    items, depth, start = [], 0, 0
    for i, ch in enumerate(nodelist):
        depth += (ch == "[") - (ch == "]")
        if depth not in (0, 1):
            return None
        if ch == "," and depth == 0:
            items.append(nodelist[start:i])
            start = i + 1
    if depth:
        return None
    items.append(nodelist[start:])
    total = 0
    for item in items:
        if not item.strip():
            return None
        count = 1
        for group in re.findall(r"\[([^\]]*)\]", item):
            size = 0
            for part in group.split(","):
                lo, _, hi = part.partition("-")
                if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
                    return None
                size += int(hi) - int(lo) + 1 if hi else 1
            count *= size
        total += count
    return total


def node_names() -> list[str]:
    """The allocation's host names (``scontrol show hostnames $SLURM_JOB_NODELIST``), this (the
    first, Ray's head) node first; ``[hostname]`` outside Slurm.

    Raises:
        subprocess.CalledProcessError: scontrol cannot expand the node list.
    """
    job = JobEnv.from_env()
    nodelist = job.nodelist
    if not nodelist:
        return [socket.gethostname()]
    out = runner.run(["scontrol", "show", "hostnames", nodelist], timeout_s=60, check=True)
    names = out.stdout.split()
    me = job.nodename
    return sorted(names, key=lambda n: n != me) if me in names else names


def node_address(node: str) -> str:
    """The IPv4 address other nodes reach ``node`` on: Slurm's ``NodeAddr`` (``scontrol show node``).

    Falls back to resolving the name (outside Slurm, or when ``scontrol`` cannot say). Slurm's own
    address is preferred because a host name may resolve to a loopback alias (Debian's 127.0.1.1)
    that other nodes cannot reach.
    """
    try:
        out = runner.run(["scontrol", "show", "node", node, "-o"], timeout_s=30)
        for field in out.stdout.split():
            if field.startswith("NodeAddr="):
                addr = field.split("=", 1)[1]
                return socket.gethostbyname(addr)
    except (OSError, subprocess.TimeoutExpired, socket.gaierror):
        pass
    return socket.gethostbyname(node)


def srun_step(nodes: list[str], module: str, *args: str, extra: tuple[str, ...] = ()) -> list[str]:
    """``srun`` command running ``python -m <module> <args>`` once on each of ``nodes`` of this job.

    ``--overlap``: the step shares the allocation with the steps already running (the point's
    own, Ray's); one task per node. ``extra`` holds further srun options (e.g. ``--gres``).
    """
    return [
        "srun",
        "--overlap",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        *(["--ntasks-per-node=1"] if len(nodes) > 1 else []),
        f"--nodelist={','.join(nodes)}",
        *extra,
        sys.executable,
        "-m",
        module,
        *args,
    ]


def partition_node_count(partition: str | None = None) -> int | None:
    """Nodes of ``partition`` (default: this job's, ``$SLURM_JOB_PARTITION``) as ``sinfo -h -p
    <partition> -o %D`` counts them; None outside Slurm or when sinfo cannot say."""
    partition = partition or JobEnv.from_env().partition
    if not partition:
        return None
    try:
        out = runner.run(["sinfo", "-h", "-p", partition, "-o", "%D"], timeout_s=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    counts = [int(x) for x in out.stdout.split() if x.isdigit()]
    return sum(counts) if out.returncode == 0 and counts else None
