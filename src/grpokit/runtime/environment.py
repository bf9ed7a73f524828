"""What the job knows about where it runs: Slurm's allocation, the GPUs, the run folder's env summary."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_RESTART_COUNT",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_CPUS_ON_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_PARTITION",
    "SLURMD_NODENAME",
    "CUDA_VISIBLE_DEVICES",
)


def in_slurm() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def slurm_task_id() -> str | None:
    """This job's own Slurm id: ``<array job id>_<task id>`` in a job array, else ``SLURM_JOB_ID``.

    Every query or command that means "this task" uses it. In an array the placeholder task's
    ``SLURM_JOB_ID`` equals ``SLURM_ARRAY_JOB_ID``, so ``scontrol requeue $SLURM_JOB_ID`` would
    requeue every task of the array and ``squeue -j $SLURM_JOB_ID`` would list them all.
    None outside Slurm.
    """
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


def slurm_time_left_s(timeout_s: float = 10) -> float | None:
    """Seconds this task has left before its time limit (``squeue -h -j <own id> -o %L``).

    None outside Slurm, when squeue fails or answers nothing parseable (``UNLIMITED``, ``INVALID``).
    """
    from grpokit.results.slurm_state import parse_duration

    task = slurm_task_id()
    if not task:
        return None
    try:
        cmd = ["squeue", "-h", "-j", task, "-o", "%L"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 1:  # exactly this task's line
        return None
    return parse_duration(lines[0])


@dataclasses.dataclass(frozen=True)
class SlurmStopView:
    """What slurmctld says about this task when a stop signal arrives (``scontrol show job -o``).

    ``requeueing``: Slurm is requeueing it (preemption in REQUEUE mode, ``scontrol requeue``):
    slurmctld counts the restart (``Restarts=``) before it sends SIGTERM, so a count above this
    run's ``SLURM_RESTART_COUNT`` means the job comes back; an unchanged one on SIGTERM means it
    ends for good (``scancel``, the time limit).
    ``preempting``: Slurm is preempting it: ``PreemptTime`` is set, at or after this run's
    ``StartTime`` (with ``preempt_send_user_signal`` the job's ``--signal`` comes then, a
    ``GraceTime`` before SIGTERM, whatever time is left before the limit).
    Either is None when scontrol cannot say.
    """

    requeueing: bool | None
    preempting: bool | None


def _slurm_time(value: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(value) if value and value[0].isdigit() else None
    except ValueError:
        return None


def slurm_stop_view(timeout_s: float = 10) -> SlurmStopView:
    """:class:`SlurmStopView` of this task (both None outside Slurm or when scontrol fails)."""
    task = slurm_task_id()
    if not task:
        return SlurmStopView(None, None)
    try:
        cmd = ["scontrol", "show", "job", "-o", task]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return SlurmStopView(None, None)
    fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
    if out.returncode != 0:
        return SlurmStopView(None, None)
    restarts = fields.get("Restarts", "")
    requeueing = int(restarts) > int(os.environ.get("SLURM_RESTART_COUNT") or 0) if restarts.isdigit() else None
    started, preempt = _slurm_time(fields.get("StartTime")), _slurm_time(fields.get("PreemptTime"))
    if "PreemptTime" not in fields:
        preempting = None
    else:
        preempting = preempt is not None and (started is None or preempt >= started)
    return SlurmStopView(requeueing, preempting)


def slurm_info() -> dict[str, Any]:
    """The allocation as ``status.json`` records it (empty outside Slurm)."""
    env = os.environ
    if not in_slurm():
        return {}
    return {
        "job_id": env.get("SLURM_JOB_ID"),
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": int(env["SLURM_ARRAY_TASK_ID"]) if env.get("SLURM_ARRAY_TASK_ID") else None,
        "restart_count": int(env.get("SLURM_RESTART_COUNT", 0)),
        "nodelist": env.get("SLURM_JOB_NODELIST"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "gpus": len(visible_gpus()),
    }


def node_names() -> list[str]:
    """The allocation's host names, this (the first) node first; ``[hostname]`` outside Slurm."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return [socket.gethostname()]
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    names = out.stdout.split()
    me = os.environ.get("SLURMD_NODENAME")
    return sorted(names, key=lambda n: n != me) if me in names else names


def node_address(node: str) -> str:
    """The address other nodes reach ``node`` on: Slurm's ``NodeAddr`` (``scontrol show node``).

    Falls back to resolving the name (outside Slurm, or when ``scontrol`` cannot say). Slurm's own
    address is preferred because a host name may resolve to a loopback alias (Debian's 127.0.1.1)
    that other nodes cannot reach.
    """
    try:
        out = subprocess.run(["scontrol", "show", "node", node, "-o"], capture_output=True, text=True, timeout=30)
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


def visible_gpus() -> list[str]:
    """GPU ids this job may use (``CUDA_VISIBLE_DEVICES`` as Slurm set it), or [] when unset."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [v for v in value.split(",") if v.strip()] if value.strip() else []


def cuda_available() -> bool:
    """Whether a real CUDA GPU is present (Slurm's gres may schedule devices that are not GPUs)."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            return out.returncode == 0 and "GPU" in out.stdout
        except (OSError, subprocess.TimeoutExpired):
            return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def cpus_for_ray(cluster_cpus: int | None) -> int:
    """CPUs given to Ray on each node: Slurm's count, else the config's, else this machine's."""
    if os.environ.get("SLURM_CPUS_ON_NODE"):
        return int(os.environ["SLURM_CPUS_ON_NODE"])
    if cluster_cpus:
        return int(cluster_cpus)
    return len(os.sched_getaffinity(0))


def summary() -> dict[str, Any]:
    """``env.json``: host, Python, the stack's versions, Slurm variables (no secrets)."""
    versions = {}
    for pkg in ("verl", "vllm", "ray", "torch", "transformers", "hydra-core", "submitit", "grpokit"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "versions": versions,
        "slurm": {k: os.environ.get(k) for k in SLURM_VARS if os.environ.get(k) is not None},
        "cuda_available": cuda_available(),
        "tmpdir": os.environ.get("TMPDIR"),
    }
