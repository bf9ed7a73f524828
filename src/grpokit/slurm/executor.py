"""A point's ``cluster`` settings as submitit's Slurm parameters (``submitit.SlurmExecutor``).

:func:`executor_parameters` returns the keywords of ``SlurmExecutor.update_parameters``, which are
the keywords of submitit's batch-script renderer as they are (``job_name``, ``time``, ``mem``,
``signal_delay_s``, ``additional_parameters``, ...): the script submitit submits and the one
:func:`grpokit.slurm.sbatch.render` shows are made from the same dict by the same function.
:func:`dependent_parameters` is the same mapping for a small job that starts after others (the
halving controller, the chained evaluation): the site keys (``partition``, ``account``, ``qos``,
``setup``) and the ``mem`` spelling come from one place, :func:`site_parameters` and
:func:`mem_parameter`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

#: Lines put first into the batch script (submitit's ``setup``; the point runs in the batch step,
#: ``use_srun=False``). See :func:`executor_parameters` for why.
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


def executor_parameters(cluster: Any, *, name: str, num_points: int) -> dict[str, Any]:
    """``submitit.SlurmExecutor.update_parameters`` keywords for one array of ``num_points`` tasks.

    Args:
        cluster: a point's ``cluster`` section, read by attribute (``grpokit.config.schema.ClusterConf``:
            the defaults are ClusterConf's alone).
        name: the job name (the sweep's name).
        num_points: tasks in the array (``array_parallelism`` is capped at it).

    Returns:
        submitit's own keywords (those of its ``_make_sbatch_string``): ``job_name``, ``time``
        (minutes), ``nodes``, ``ntasks_per_node``, ``gpus_per_node``, ``cpus_per_task``,
        ``partition``, ``array_parallelism``, ``signal_delay_s``, ``setup``, ``use_srun``,
        ``additional_parameters``, ``stderr_to_stdout``, and ``mem`` (``"<n>GB"``), ``account``,
        ``qos``, ``constraint`` when set.

    The warning signal (USR2, ``signal_delay_s`` before the time limit) and ``--requeue`` are what
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
    signals the job steps only: the driver's relay step (:mod:`grpokit.runtime.processes.signal_relay`)
    passes it on, and the Ray worker step ignores it (:mod:`grpokit.runtime.processes.ray_worker`).
    The kit's ``signal`` wins over one in ``additional_parameters``: the driver only acts on USR2.
    """
    lead_s = int(cluster.signal_delay_s)
    params: dict[str, Any] = {
        "job_name": name,
        "partition": cluster.partition,
        "time": int(cluster.timeout_min),
        "nodes": int(cluster.nodes),
        "ntasks_per_node": 1,
        "gpus_per_node": int(cluster.gpus_per_node),
        "cpus_per_task": int(cluster.cpus_per_task or 1),
        "array_parallelism": min(int(cluster.array_parallelism), max(num_points, 1)),
        "signal_delay_s": lead_s,
        "setup": [*BATCH_SUPERVISOR_SETUP, *(cluster.setup or [])],
        "use_srun": False,
        "additional_parameters": {
            "requeue": True,
            **(cluster.additional_parameters or {}),
            "signal": signal_option(lead_s),
        },
        "stderr_to_stdout": True,
    }
    if cluster.mem_gb:
        params["mem"] = mem_parameter(cluster.mem_gb)
    params.update(site_parameters(cluster, keys=("account", "qos", "constraint")))
    return params


def mem_parameter(mem_gb: float) -> str:
    """submitit's ``mem`` for ``mem_gb`` GiB: ``"<n>GB"`` (sbatch ``--mem=<n>GB``; Slurm's GB are 1024 MB)."""
    return f"{int(mem_gb)}GB"


def site_parameters(cluster: Any, *, keys: tuple[str, ...] = ("account", "qos")) -> dict[str, Any]:
    """The set ones of ``keys`` of ``cluster`` (``account``, ``qos``, ``constraint``: sbatch's
    ``--account``/``--qos``/``--constraint``); an unset one is left to Slurm's default."""
    return {key: getattr(cluster, key) for key in keys if getattr(cluster, key, None)}


def dependent_parameters(
    cluster: Any,
    *,
    name: str,
    dependency: str,
    timeout_min: int,
    cpus_per_task: int = 1,
    gpus_per_node: int = 0,
    mem_gb: float | None = 1,
    partition: str | None = None,
) -> dict[str, Any]:
    """``submitit.SlurmExecutor.update_parameters`` keywords for one job (one node, one task) that
    starts only after others.

    Args:
        cluster: the points' ``cluster`` section, read by attribute: ``partition`` (unless
            ``partition`` is given), ``account``, ``qos`` and ``setup``.
        name: the job name.
        dependency: sbatch's ``--dependency`` value, e.g. ``afterok:120_3`` or ``afterany:120:121``;
            with ``--kill-on-invalid-dep=yes`` Slurm cancels the job once the dependency can never
            be satisfied (no job left pending with reason ``DependencyNeverSatisfied``).
        timeout_min: ``--time`` in minutes. cpus_per_task, gpus_per_node: the request (0 GPUs: no
            ``--gpus-per-node``). mem_gb: ``--mem`` in GiB (None: the partition's default).
        partition: the job's partition (None: ``cluster.partition``).

    Returns:
        submitit's keywords: ``job_name``, ``partition``, ``time``, ``nodes``, ``ntasks_per_node``,
        ``cpus_per_task``, ``setup``, ``additional_parameters``, and ``gpus_per_node``, ``mem``,
        ``account``, ``qos`` when set.
    """
    params: dict[str, Any] = {
        "job_name": name,
        "partition": partition or cluster.partition,
        "time": int(timeout_min),
        "nodes": 1,
        "ntasks_per_node": 1,
        "cpus_per_task": int(cpus_per_task),
        "setup": list(cluster.setup or []),
        "additional_parameters": {"dependency": dependency, "kill-on-invalid-dep": "yes"},
    }
    if gpus_per_node:
        params["gpus_per_node"] = int(gpus_per_node)
    if mem_gb:
        params["mem"] = mem_parameter(mem_gb)
    params.update(site_parameters(cluster))
    return params


def new_executor(folder: Path | str, params: dict[str, Any], *, python: str | None = None):
    """A ``submitit.SlurmExecutor`` writing its files under ``folder``, with ``params`` (the
    keywords of :func:`executor_parameters` or :func:`dependent_parameters`); ``python``: the
    job's interpreter (None: this process's, submitit's default)."""
    import submitit

    executor = submitit.SlurmExecutor(folder=str(folder), python=shlex.quote(python) if python else None)
    executor.update_parameters(**params)
    return executor


def make_executor(folder: Path, cluster: Any, *, name: str, num_points: int):
    """A ``submitit.SlurmExecutor`` writing its files under ``folder``, with :func:`executor_parameters`."""
    # cluster.python: the job's own interpreter (null: this command's, submitit's default)
    python = getattr(cluster, "python", None)
    return new_executor(folder, executor_parameters(cluster, name=name, num_points=num_points), python=python)
