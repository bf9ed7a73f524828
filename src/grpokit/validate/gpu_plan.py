"""The job's GPU plan: which GPUs the trainer and each sidecar use, with their memory fractions, and
Megatron's parallel sizes against the trainer's GPUs (:func:`megatron_sizes`).

A sidecar with ``placement: dedicated`` gets GPUs of its own (the last ones of the node) and the
trainer's Ray is not told about them; one with ``placement: shared`` sits on the trainer's first
GPU next to the rollout engine, and the vLLM memory fractions on that GPU must leave room for the
trainer: their sum may not exceed :data:`MAX_SHARED_FRACTION` (vLLM fails at start-up with "Free
memory on device ... less than desired GPU memory utilization" otherwise; vllm#20305, verl#2140).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

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


#: The Megatron roles verl builds with ``strategy: megatron`` (ppo_megatron_trainer's actor and ref;
#: its critic too, when the point trains one: grpokit.validate.run_checks says when).
MEGATRON_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")


def _size(cfg: DictConfig, key: str, default: int | None = 1) -> int | None:
    value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
    return default if value is None or isinstance(value, bool) else int(value)


def megatron_sizes(point: str, cfg: DictConfig, world: int, roles: tuple[str, ...] = MEGATRON_ROLES) -> list[Problem]:
    """Megatron's parallel sizes of each role with ``strategy: megatron`` against the trainer's ``world``
    GPUs (``trainer.nnodes x trainer.n_gpus_per_node``), as Megatron-Core's
    ``megatron/core/parallel_state.py::initialize_model_parallel`` checks them when verl's engine calls it
    (``verl/workers/engine/megatron/transformer_impl.py::MegatronEngine._init_device_mesh``, one call per
    process, all roles on the same GPUs; verl 0.9.1's ``verl/utils/config.py::validate_config`` asserts
    the first rule for the actor, and only without ``use_dynamic_bsz``):

    - ``tensor_model_parallel_size x pipeline_model_parallel_size x context_parallel_size`` divides the
      world size (Megatron-Core: "world_size (W) is not divisible by T x P x C"); data parallelism is
      what is left, ``dp = W / (T x P x C)``;
    - expert parallelism lives within data parallelism: ``expert_tensor_parallel_size (default: T) x
      expert_model_parallel_size x P`` divides the world size ("world_size (W) is not divisible by
      expert_tensor_model_pipeline_parallel size (E)"), i.e. with the default expert TP the expert
      size divides ``dp x C``;
    - ``virtual_pipeline_model_parallel_size`` needs ``pipeline_model_parallel_size`` > 1 (Megatron:
      "pipeline-model-parallel size should be greater than 1 with interleaved schedule").

    Returns one :class:`Problem` per role and rule (the role's key, the numbers, the fix).
    """
    problems = []
    for role in roles:
        if str(OmegaConf.select(cfg, f"{role}.strategy", default="")) != "megatron":
            continue
        if role == "critic" and not _uses_critic(cfg):
            continue
        m = f"{role}.megatron"
        tp, pp, cp = (_size(cfg, f"{m}.{k}") or 1 for k in PARALLEL_KEYS)
        ep = _size(cfg, f"{m}.expert_model_parallel_size") or 1
        etp = _size(cfg, f"{m}.expert_tensor_parallel_size", None) or tp
        vpp = _size(cfg, f"{m}.virtual_pipeline_model_parallel_size", None)
        model = tp * pp * cp
        if world % model:
            problems.append(
                Problem(
                    point,
                    f"verl.{m}.tensor_model_parallel_size",
                    f"Megatron's tp {tp} x pp {pp} x cp {cp} = {model} does not divide the point's {world} GPU(s) "
                    f"(Megatron-Core: world_size ({world}) is not divisible by {model})",
                    f"set verl.{m}.tensor_model_parallel_size / pipeline_model_parallel_size / context_parallel_size "
                    f"so that their product divides {world} (one of {_divisors(world)}), or ask for a multiple of "
                    f"{model} GPUs (cluster.gpus_per_node x cluster.nodes)",
                )
            )
            continue
        expert = etp * ep * pp
        if world % expert:
            dp = world // model
            problems.append(
                Problem(
                    point,
                    f"verl.{m}.expert_model_parallel_size",
                    f"Megatron's expert tp {etp} x ep {ep} x pp {pp} = {expert} does not divide the point's {world} "
                    f"GPU(s): expert parallelism must fit in data parallelism (dp {dp} x cp {cp}) "
                    f"(Megatron-Core: world_size ({world}) is not divisible by expert_tensor_model_pipeline_parallel "
                    f"size ({expert}))",
                    f"set verl.{m}.expert_model_parallel_size to a divisor of {world // (etp * pp) or 1} "
                    f"(one of {_divisors(max(world // (etp * pp), 1))})",
                )
            )
        if vpp and vpp > 1 and pp <= 1:
            problems.append(
                Problem(
                    point,
                    f"verl.{m}.virtual_pipeline_model_parallel_size",
                    f"virtual pipeline size {vpp} with pipeline_model_parallel_size {pp} (Megatron-Core: "
                    "pipeline-model-parallel size should be greater than 1 with interleaved schedule)",
                    f"set verl.{m}.pipeline_model_parallel_size > 1, or "
                    f"verl.{m}.virtual_pipeline_model_parallel_size=null",
                )
            )
    return problems


PARALLEL_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _uses_critic(cfg: DictConfig) -> bool:
    enable = OmegaConf.select(cfg, "critic.enable", default=None)
    if enable is not None:
        return bool(enable)
    return str(OmegaConf.select(cfg, "algorithm.adv_estimator", default="")) == "gae"


def check(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """Refuse plans that leave the trainer no GPU or over-subscribe a shared GPU's memory, and Megatron
    parallel sizes that do not fit the trainer's GPUs (:func:`megatron_sizes`)."""
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
    world = _size(cfg, "trainer.nnodes") * _size(cfg, "trainer.n_gpus_per_node", 0)
    if world > 0:
        problems += megatron_sizes(spec.name, cfg, world)
    return problems
