"""The Slurm request of a sweep: submitit executor parameters from the ``cluster`` config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Lines put first into submitit's batch script (``slurm_setup``; submitit runs the point in the
#: batch step, ``use_srun=False``). See :func:`executor_parameters` for why.
BATCH_SUPERVISOR_SETUP = [
    "# grpokit: this batch shell runs this same script again as its child and waits for it: Slurm's",
    "# warning (--signal=B:USR2) and scancel --batch --signal=USR2 reach this shell only, which passes",
    "# them to the point's process; SIGTERM (scancel, preemption) does not end this shell before it.",
    'if [ -z "${GRPOKIT_BATCH_CHILD:-}" ]; then',
    '  GRPOKIT_BATCH_CHILD=1 bash "$0" "$@" &',
    "  _grpokit_child=$!",
    '  trap \'kill -USR2 "$_grpokit_child" 2>/dev/null; pkill -USR2 -P "$_grpokit_child"\' USR2',
    "  trap ':' TERM",
    "  while :; do",
    '    wait "$_grpokit_child"; _grpokit_rc=$?',
    "    # a trapped signal ends wait early (status > 128) while the child runs on: wait again",
    '    [ "$_grpokit_rc" -gt 128 ] || break',
    '    kill -0 "$_grpokit_child" 2>/dev/null && continue',
    '    wait "$_grpokit_child" 2>/dev/null; _grpokit_r=$?; [ "$_grpokit_r" -ne 127 ] && _grpokit_rc=$_grpokit_r',
    "    break",
    "  done",
    '  exit "$_grpokit_rc"',
    "fi",
    "trap '' USR2  # the child shell; the point's process sets its own USR2 handler",
    "trap ':' TERM",
]


def signal_option(lead_s: int) -> str:
    """``#SBATCH --signal`` value: USR2 ``lead_s`` seconds before the time limit, to the batch shell only."""
    return f"B:USR2@{int(lead_s)}"


def executor_parameters(cluster: dict[str, Any], *, name: str, num_points: int) -> dict[str, Any]:
    """submitit ``AutoExecutor.update_parameters`` keywords for one array of ``num_points`` tasks.

    The warning signal (USR2, ``signal_lead_s`` before the time limit) and ``--requeue`` are what
    let a point checkpoint and come back (docs/run-folder.md, status.json ``attempts``).

    Where the warning goes: submitit's default ``--signal=USR2@lead`` (no ``B:``) makes Slurm
    signal every job step, and a 2-node job's Ray worker step (``srun --overlap ... ray start
    --block``) died of it before the save it was needed for. Here the signal goes to the batch
    shell only (``B:``) and the point runs in the batch step itself (``use_srun=False``, as
    ``slurm/train.sbatch`` does; on several nodes the driver starts the other nodes' Ray workers
    with ``srun --overlap``). Bash defers a trap while a foreground command runs, so
    :data:`BATCH_SUPERVISOR_SETUP` makes the batch shell run the script again as a background
    child and wait for it: its USR2 trap passes the signal on to the point's process, and its TERM
    trap keeps it alive while the driver stops in order (with the point in an ``srun`` step,
    ``srun`` answers Slurm's SIGTERM by SIGKILLing the step, so no driver could ever record a
    cancellation or a preemption). ``scancel --signal=USR2 <array>_<task>`` without ``--batch``
    signals the job steps only: the driver's relay step (:mod:`grpokit.runtime.signal_relay`)
    passes it on, and the Ray worker step ignores it (:mod:`grpokit.runtime.ray_worker`).
    The kit's ``signal`` wins over one in ``additional_sbatch``: the driver only acts on USR2.
    """
    additional = {
        "requeue": True,
        **(cluster.get("additional_sbatch") or {}),
        "signal": signal_option(int(cluster.get("signal_lead_s", 600))),
    }
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
        "slurm_setup": [*BATCH_SUPERVISOR_SETUP, *(cluster.get("setup") or [])],
        "slurm_use_srun": False,
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
        "use_srun": p["slurm_use_srun"],
    }
    if "mem_gb" in p:
        kwargs["mem"] = f"{p['mem_gb']}GB"
    for key in ("account", "qos", "constraint"):
        if f"slurm_{key}" in p:
            kwargs[key] = p[f"slurm_{key}"]
    text = _make_sbatch_string(command="python -u -m submitit.core._submit <folder>", folder="<folder>", **kwargs)
    return "\n".join(line for line in text.splitlines() if line.startswith("#SBATCH"))
