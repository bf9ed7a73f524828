"""The sweep's Slurm request checked against the real cluster before anything is submitted.

Facts come from the cluster itself (``scontrol show partition -o``, ``scontrol show node -o``,
``scontrol show config``): a request Slurm cannot satisfy (an unknown partition, more memory, CPUs,
GPUs or nodes than the partition has, a time limit above its ``MaxTime``) becomes a
:class:`~grpokit.problems.Problem` naming the ``cluster.*`` key and the value that fits.
What the facts cannot judge (accounts, QOS, constraints) is asked of Slurm with ``sbatch
--test-only`` and the same ``#SBATCH`` lines submitit would write. A sweep larger than
``MaxArraySize`` is not a problem: :func:`grpokit.slurm.cluster.array_chunks` splits it into several arrays.

On a machine without Slurm's client tools nothing is checked (one line says so).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpokit.config.schema import ClusterConf
from grpokit.problems import Problem, note
from grpokit.slurm import sbatch
from grpokit.slurm.cluster import SlurmFacts, SlurmQueryError, constraint_matches, query_facts


def _request(cluster: Mapping[str, Any]) -> dict[str, Any]:
    c = ClusterConf.of(cluster)
    return {
        "partition": c.partition,
        "nodes": c.nodes,
        "gpus": c.gpus_per_node,
        "cpus": c.cpus_per_task or 1,
        "mem_mb": c.mem_gb * 1024 if c.mem_gb else None,
        "time_min": c.timeout_min,
    }


def check_facts(
    cluster: ClusterConf | Mapping[str, Any], facts: SlurmFacts, point: str = "all points"
) -> list[Problem]:
    """The request (``cluster.*``, a section or its mapping) against the partition's limits and its largest nodes."""
    cluster = ClusterConf.of(cluster)
    req = _request(cluster)
    name = req["partition"]
    if not name:
        return []  # Slurm's default partition; sbatch --test-only judges it
    part = facts.partitions.get(name)
    if part is None:
        known = ", ".join(sorted(facts.partitions)) or "none"
        return [
            Problem(
                point,
                "cluster.partition",
                f"Slurm has no partition {name!r}",
                f"set cluster.partition to one of: {known} (sinfo lists them)",
            )
        ]
    nodes = facts.nodes_of(name)
    problems: list[Problem] = []

    def largest(attr: str, cap: int | None) -> int:
        best = max((getattr(n, attr) for n in nodes), default=0)
        return min(best, cap) if cap is not None else best

    max_mem = largest("memory_mb", part.max_mem_per_node_mb)
    max_cpus = largest("cpus", part.max_cpus_per_node)
    max_gpus = largest("gpus", None)
    where = f"partition {name}"
    if req["mem_mb"] is not None and req["mem_mb"] > max_mem:
        problems.append(
            Problem(
                point,
                "cluster.mem_gb",
                f"{cluster.mem_gb} GB per node is more than any node of {where} has ({max_mem} MB)",
                f"set cluster.mem_gb<={max_mem // 1024}" if max_mem >= 1024 else "set cluster.mem_gb=null",
            )
        )
    if req["cpus"] > max_cpus:
        problems.append(
            Problem(
                point,
                "cluster.cpus_per_task",
                f"{req['cpus']} CPUs per node is more than any node of {where} has ({max_cpus})",
                f"set cluster.cpus_per_task<={max_cpus}",
            )
        )
    if req["gpus"] > max_gpus:
        problems.append(
            Problem(
                point,
                "cluster.gpus_per_node",
                f"{req['gpus']} GPUs per node is more than any node of {where} has ({max_gpus}, gres gpu)",
                f"set cluster.gpus_per_node<={max_gpus}" if max_gpus else "choose a partition with GPUs",
            )
        )
    if part.max_time_min is not None and req["time_min"] > part.max_time_min:
        problems.append(
            Problem(
                point,
                "cluster.timeout_min",
                f"{req['time_min']} min is above {where}'s MaxTime ({part.max_time_min} min)",
                f"set cluster.timeout_min<={part.max_time_min} (a point that needs longer is requeued and resumes)",
            )
        )
    if cluster.constraint and constraint_matches(cluster.constraint, ()) is not None:
        having = [n for n in nodes if constraint_matches(cluster.constraint, n.features)]
        if not having:
            offered = sorted({f for n in nodes for f in n.features})
            problems.append(
                Problem(
                    point,
                    "cluster.constraint",
                    f"no node of {where} has the features --constraint={cluster.constraint} asks for "
                    f"(its nodes have: {', '.join(offered) or 'no features'})",
                    "set cluster.constraint (or cluster.gpu_constraints.<profile>) to features those nodes have, "
                    "or choose the partition of those GPUs",
                )
            )
        nodes = having
    if problems:
        return problems
    fitting = [
        n
        for n in nodes
        if n.cpus >= req["cpus"] and n.gpus >= req["gpus"] and (req["mem_mb"] is None or n.memory_mb >= req["mem_mb"])
    ]
    limit = min(len(fitting), part.max_nodes) if part.max_nodes is not None else len(fitting)
    if req["nodes"] > limit:
        what = f"{req['gpus']} GPUs, {req['cpus']} CPUs" + (f", {req['mem_mb']} MB" if req["mem_mb"] else "")
        problems.append(
            Problem(
                point,
                "cluster.nodes",
                f"{req['nodes']} node(s) requested; {where} has {limit} node(s) with at least {what}",
                f"set cluster.nodes<={limit}" if limit else "lower cluster.gpus_per_node/cpus_per_task/mem_gb",
            )
        )
    return problems


def sbatch_test_only(preview: str, *, num_tasks: int, parallelism: int) -> str | None:
    """``sbatch --test-only`` with submitit's ``#SBATCH`` lines; Slurm's refusal, or None if it would run."""
    lines = [
        line
        for line in preview.splitlines()
        if line.startswith("#SBATCH")
        and not line.startswith(("#SBATCH --output", "#SBATCH --error", "#SBATCH --array"))
    ]
    lines.append(f"#SBATCH --array=0-{num_tasks - 1}%{max(1, min(parallelism, num_tasks))}")
    with tempfile.TemporaryDirectory(prefix="grpokit-test-only-") as tmp:
        script = Path(tmp) / "request.sh"
        script.write_text("#!/bin/bash\n" + "\n".join(lines) + "\ntrue\n")
        return sbatch.test_only_refusal(script)


def check_request(
    cluster: dict[str, Any], *, name: str, num_points: int, facts: SlurmFacts | None = None
) -> list[Problem]:
    """Every check on a sweep's Slurm request; ``[]`` when it fits (or there is no Slurm here).

    Args:
        cluster: the resolved ``cluster`` section (``kind: slurm``).
        name: the job name (the sweep's name).
        num_points: the sweep's size (split into arrays of at most ``MaxArraySize``).
        facts: the cluster's facts (queried when None).
    """
    cluster = ClusterConf.of(cluster)
    if cluster.kind != "slurm":
        return []
    if facts is None:
        try:
            facts = query_facts()
        except SlurmQueryError as exc:
            return [Problem("all points", "cluster", f"Slurm does not answer: {exc}", "retry when slurmctld is up")]
    if facts is None:
        note("no Slurm client tools here (scontrol not found): the Slurm request was not checked")
        return []
    problems = check_facts(cluster, facts)
    if problems or not sbatch.available():
        return problems
    chunk = min(num_points, facts.max_array_size)
    parallelism = int(cluster.array_parallelism or chunk)
    refusal = sbatch_test_only(
        sbatch.preview(cluster, name=name, num_points=chunk), num_tasks=chunk, parallelism=parallelism
    )
    if refusal:
        return [
            Problem(
                "all points",
                "cluster",
                f"Slurm refuses the request (sbatch --test-only): {refusal}",
                "change the cluster.* setting Slurm names (account, qos, constraint, additional_parameters)",
            )
        ]
    return []
