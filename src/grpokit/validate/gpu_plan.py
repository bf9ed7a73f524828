"""The job's GPU plan: which GPUs the trainer and each sidecar use, with their memory fractions.

A sidecar with ``placement: dedicated`` gets GPUs of its own (the last ones of the node) and the
trainer's Ray is not told about them; one with ``placement: shared`` sits on the trainer's first
GPU next to the rollout engine, and the vLLM memory fractions on that GPU must leave room for the
trainer: their sum may not exceed :data:`MAX_SHARED_FRACTION` (vLLM fails at start-up with "Free
memory on device ... less than desired GPU memory utilization" otherwise; vllm#20305, verl#2140).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from grpokit.config.point import PointSpec
from grpokit.problems import Problem

MAX_SHARED_FRACTION = 0.95
#: verl's default ``actor_rollout_ref.rollout.gpu_memory_utilization`` (verl/trainer/config/rollout).
VERL_DEFAULT_ROLLOUT_FRACTION = 0.5


def plan(spec: PointSpec, rollout_fraction: float) -> dict[str, Any]:
    """The plan as written to ``gpu_plan.json``: local GPU indices per component, fractions.

    Indices are positions in the job's ``CUDA_VISIBLE_DEVICES`` list (0 = its first GPU).
    """
    total = int(spec.cluster.gpus_per_node)
    next_free = total
    sidecars = {}
    for name, sc in spec.sidecars.items():
        if not sc.gpus:
            continue
        if sc.placement == "dedicated":
            count = int(sc.gpus)
            next_free -= count
            sidecars[name] = {
                "gpus": list(range(next_free, next_free + count)),
                "placement": "dedicated",
                "gpu_memory_utilization": float(sc.gpu_memory_utilization),
            }
        else:
            sidecars[name] = {
                "gpus": [0],
                "placement": "shared",
                "gpu_memory_utilization": float(sc.gpu_memory_utilization),
            }
    trainer = {"gpus": list(range(0, max(next_free, 0))), "rollout_gpu_memory_utilization": rollout_fraction}
    shared_sum = rollout_fraction + sum(
        s["gpu_memory_utilization"] for s in sidecars.values() if s["placement"] == "shared"
    )
    return {
        "gpus_per_node": total,
        "trainer": trainer,
        "sidecars": sidecars,
        "gpu0_vllm_fraction_sum": round(shared_sum, 4),
    }


def check(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """Refuse plans that leave the trainer no GPU or over-subscribe a shared GPU's memory."""
    fraction = float(cfg.actor_rollout_ref.rollout.gpu_memory_utilization)
    p = plan(spec, fraction)
    problems = []
    if not p["trainer"]["gpus"]:
        problems.append(
            Problem(
                spec.name,
                "cluster.gpus_per_node",
                f"{p['gpus_per_node']} GPU(s) per node leave none to the trainer after the dedicated sidecars",
                "ask for more GPUs or set the sidecars' placement: shared",
            )
        )
    shared = {n: s for n, s in p["sidecars"].items() if s["placement"] == "shared"}
    if shared and p["gpu0_vllm_fraction_sum"] > MAX_SHARED_FRACTION:
        parts = " + ".join([f"rollout {fraction}"] + [f"{n} {s['gpu_memory_utilization']}" for n, s in shared.items()])
        room = round(MAX_SHARED_FRACTION - sum(s["gpu_memory_utilization"] for s in shared.values()), 2)
        problems.append(
            Problem(
                spec.name,
                "verl.actor_rollout_ref.rollout.gpu_memory_utilization",
                f"GPU 0 is shared and its vLLM memory fractions sum to {p['gpu0_vllm_fraction_sum']} ({parts}) "
                f"> {MAX_SHARED_FRACTION}",
                f"set verl.actor_rollout_ref.rollout.gpu_memory_utilization<={room}, lower the sidecar's "
                "gpu_memory_utilization, or give the sidecar its own GPU (placement: dedicated, one more GPU)",
            )
        )
    return problems
