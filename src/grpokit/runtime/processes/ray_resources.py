"""How much of the node the job's Ray may take: object store memory and worker ports, from the allocation.

Ray sizes its object store as 30 % of the memory it sees, and inside a Slurm job it sees the node's
memory: Ray reads only the cgroup root's limit (``/sys/fs/cgroup/memory.max``), not the job's nested
cgroup, and knows nothing of ``--mem``. A job with ``--mem=64G`` on a 2 TB node then gets a 200 GB
object store it is not allowed to fill (the job is OOM-killed, or the node swaps). Here the size
comes from the job's own memory: ``SLURM_MEM_PER_NODE``, else ``SLURM_MEM_PER_CPU`` x the node's
CPUs, and the job's cgroup limit when it is lower.

Every Ray worker process (one per task slot and one per actor) binds one port of the worker port
range; a fixed range runs out on a 192-thread node, so the range grows with the CPUs given to Ray.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from grpokit.slurm.task import JobEnv

MIB = 1024**2
#: Ray's floor (``ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES``): ``ray start`` refuses less.
RAY_MIN_OBJECT_STORE_BYTES = 75 * MIB
#: Ray's cap on its default size (``ray_constants.DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES``, 200 GB).
RAY_MAX_DEFAULT_OBJECT_STORE_BYTES = 200 * 10**9
#: Above this size Ray refuses an object store larger than /dev/shm (``REQUIRE_SHM_SIZE_THRESHOLD``).
RAY_REQUIRE_SHM_BYTES = 10**10
#: Ray's own default fraction (``DEFAULT_OBJECT_STORE_MEMORY_PROPORTION``), applied to the job's memory.
DEFAULT_OBJECT_STORE_FRACTION = 0.3
#: Worker ports: never fewer than this (the block the kit always reserved) ...
MIN_WORKER_PORTS = 200
#: ... else this many per CPU given to Ray (task workers up to the CPU count, plus one per actor:
#: verl's FSDP workers, vLLM servers, agent-loop and reward-loop workers, Ray's IO workers) ...
WORKER_PORTS_PER_CPU = 3
#: ... and at most this many (the registry's range [15000, 32768) must leave room for other jobs).
MAX_WORKER_PORTS = 4000
_UNLIMITED = 1 << 60  # cgroup v1 writes 9223372036854771712 for "no limit"


def slurm_memory_bytes(env: Mapping[str, str] | None = None) -> int | None:
    """The job's memory on this node from Slurm's variables, in bytes; None when Slurm sets none.

    ``SLURM_MEM_PER_NODE`` (MB, from ``--mem``) wins; else ``SLURM_MEM_PER_CPU`` (MB, from
    ``--mem-per-cpu`` or the partition's ``DefMemPerCPU``) x ``SLURM_CPUS_ON_NODE``. A value of 0
    (``--mem=0``: all of the node's memory) counts as not set.
    """
    mb = JobEnv.from_env(env).memory_mb  # env None: os.environ
    return mb * MIB if mb else None


def cgroup_memory_limit(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """The lowest memory limit on this process's cgroup path (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), in bytes; None when unlimited or unreadable.

    Limits of parent cgroups apply too, so the path is walked up to the root.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":  # cgroup v2 unified hierarchy
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        path = base / rel if rel else base
        while True:
            candidates.append(path / name)
            if path == base:
                break
            path = path.parent
    limits = []
    for file in candidates:
        try:
            text = file.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < _UNLIMITED:
            limits.append(int(text))
    return min(limits) if limits else None


def job_memory_bytes(env: Mapping[str, str] | None = None, cgroup_limit: int | None = None) -> int | None:
    """The memory this job may use on this node, in bytes: the lower of Slurm's and the cgroup's.

    ``cgroup_limit`` is :func:`cgroup_memory_limit`'s value (passed in for tests). None when
    neither says anything (outside Slurm without a cgroup limit): Ray then sizes from the node.
    """
    known = [v for v in (slurm_memory_bytes(env), cgroup_limit) if v]
    return min(known) if known else None


def shm_available_bytes(path: str = "/dev/shm") -> int | None:
    """Free bytes of the shared-memory file system Ray puts its object store on."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bsize * st.f_bavail


def object_store_bytes(
    job_memory: int | None, fraction: float = DEFAULT_OBJECT_STORE_FRACTION, shm_available: int | None = None
) -> int | None:
    """``ray start --object-store-memory`` for a job with ``job_memory`` bytes on the node.

    ``fraction`` x the job's memory, capped as Ray caps its own default (200 GB, and 95 % of
    ``/dev/shm`` but not below 10 GB, the size above which Ray refuses a store bigger than
    /dev/shm), and never below Ray's minimum of 75 MiB. None when the job's memory is unknown
    (Ray decides, as before).

    Raises:
        ValueError: ``fraction`` is not in (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"runtime.ray_object_store_fraction must be in (0, 1], got {fraction}")
    if not job_memory:
        return None
    size = int(job_memory * fraction)
    cap = RAY_MAX_DEFAULT_OBJECT_STORE_BYTES
    if shm_available is not None:
        cap = min(cap, max(RAY_REQUIRE_SHM_BYTES, int(shm_available * 0.95)))
    return max(RAY_MIN_OBJECT_STORE_BYTES, min(size, cap))


def worker_port_count(num_cpus: int, override: int | None = None) -> int:
    """Size of Ray's worker port range on a node where Ray gets ``num_cpus`` CPUs.

    ``override`` (``runtime.ray_worker_ports``) wins when set. Otherwise
    ``WORKER_PORTS_PER_CPU`` per CPU, between ``MIN_WORKER_PORTS`` and ``MAX_WORKER_PORTS``.

    Raises:
        ValueError: ``override`` is below 10 (Ray could not start its first workers).
    """
    if override is not None:
        if int(override) < 10:
            raise ValueError(f"runtime.ray_worker_ports must be at least 10, got {override}")
        return int(override)
    return max(MIN_WORKER_PORTS, min(MAX_WORKER_PORTS, WORKER_PORTS_PER_CPU * max(int(num_cpus), 1)))


def cluster_sizes(runtime: Mapping, num_cpus: int) -> dict[str, int | None]:
    """``object_store_bytes`` and ``worker_ports`` keywords of ``ray_cluster.start_cluster`` for this job.

    ``runtime`` is the point's ``runtime`` section (``ray_object_store_fraction``, ``ray_worker_ports``).
    """
    from grpokit.config.schema import RuntimeConf  # the one default of each key

    runtime = RuntimeConf.of(runtime)
    fraction = runtime.ray_object_store_fraction
    memory = job_memory_bytes(cgroup_limit=cgroup_memory_limit())
    return {
        "object_store_bytes": object_store_bytes(
            memory,
            DEFAULT_OBJECT_STORE_FRACTION if fraction is None else float(fraction),
            shm_available_bytes(),
        ),
        "worker_ports": worker_port_count(num_cpus, runtime.ray_worker_ports),
    }
