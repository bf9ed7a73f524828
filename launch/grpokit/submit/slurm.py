"""The Slurm request of a sweep: submitit executor parameters from the ``cluster`` config."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def executor_parameters(cluster: dict[str, Any], *, name: str, num_points: int) -> dict[str, Any]:
    """submitit ``AutoExecutor.update_parameters`` keywords for one array of ``num_points`` tasks.

    The warning signal (USR2, ``signal_lead_s`` before the time limit) and ``--requeue`` are what
    let a point checkpoint and come back (docs/run-folder.md, status.json ``attempts``).
    """
    additional = {"requeue": True, **(cluster.get("additional_sbatch") or {})}
    params: dict[str, Any] = {
        "name": name,
        "nodes": int(cluster.get("nodes", 1)),
        "tasks_per_node": 1,
        "gpus_per_node": int(cluster.get("gpus_per_node", 1)),
        "cpus_per_task": int(cluster.get("cpus_per_task") or 1),
        "timeout_min": int(cluster.get("time_min", 60)),
        "slurm_partition": cluster.get("partition"),
        "slurm_array_parallelism": min(int(cluster.get("array_parallelism", 16)), max(num_points, 1)),
        "slurm_signal_delay_s": int(cluster.get("signal_lead_s", 600)),
        "slurm_setup": list(cluster.get("setup") or []),
        "slurm_additional_parameters": additional,
        "stderr_to_stdout": True,
    }
    if cluster.get("mem_gb"):
        params["mem_gb"] = int(cluster["mem_gb"])
    for key in ("account", "qos", "constraint"):
        if cluster.get(key):
            params[f"slurm_{key}"] = cluster[key]
    return params


def make_executor(folder: Path, cluster: dict[str, Any], *, name: str, num_points: int):
    """A submitit Slurm executor writing its files under ``folder``."""
    import submitit

    executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    executor.update_parameters(**executor_parameters(cluster, name=name, num_points=num_points))
    return executor


def sbatch_preview(cluster: dict[str, Any], *, name: str, num_points: int) -> str:
    """The ``#SBATCH`` lines submitit would write (for ``dry_run``), without submitting."""
    from submitit.slurm.slurm import _make_sbatch_string

    p = executor_parameters(cluster, name=name, num_points=num_points)
    kwargs = {
        "job_name": p["name"],
        "partition": p["slurm_partition"],
        "time": p["timeout_min"],
        "nodes": p["nodes"],
        "ntasks_per_node": 1,
        "cpus_per_task": p["cpus_per_task"],
        "gpus_per_node": p["gpus_per_node"],
        "signal_delay_s": p["slurm_signal_delay_s"],
        "setup": p["slurm_setup"],
        "array_parallelism": p["slurm_array_parallelism"],
        "map_count": num_points,
        "additional_parameters": p["slurm_additional_parameters"],
        "stderr_to_stdout": True,
    }
    if "mem_gb" in p:
        kwargs["mem"] = f"{p['mem_gb']}GB"
    for key in ("account", "qos", "constraint"):
        if f"slurm_{key}" in p:
            kwargs[key] = p[f"slurm_{key}"]
    text = _make_sbatch_string(command="python -u -m submitit.core._submit <folder>", folder="<folder>", **kwargs)
    return "\n".join(line for line in text.splitlines() if line.startswith("#SBATCH"))
