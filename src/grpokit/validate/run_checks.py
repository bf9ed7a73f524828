"""What verl, vLLM and FSDP check at worker start or at step 1, checked before submission.

verl's ``validate_config`` passes configs that then die on the GPU after minutes of start-up:
a rollout tensor-parallel size the point's GPUs cannot hold (verl's ``engine_workers.py``:
"rollout world_size: 1 is not divisible by infer_world_size: 2"), a Ulysses size above the GPUs
(a device mesh with dp=0), a rollout engine the job's environment lacks, an adapter path that is
not there, an advantage estimator verl does not register ("Unknown advantage estimator" at step
1), a vLLM memory fraction outside (0, 1] (vLLM's ``CacheConfig``), a micro batch that does not
divide the mini batch per GPU (``prepare_micro_batches``). Each is decided here from the composed
config, the point's GPUs (``trainer.n_gpus_per_node`` x ``trainer.nnodes``, which the kit derives
from ``cluster.gpus_per_node`` and ``cluster.nodes``), the installed packages and the file system.

Also the kit's own contract: the job is requeued after a preemption or its time limit and
resumes from its newest checkpoint, so ``trainer.resume_mode=disable`` is refused on Slurm, a
``save_freq`` that saves nothing before the last step is noted, and a checkpoint folder that
cannot be created is refused. One :class:`Problem` per finding, on the key the user types.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpokit.config.hydra_internals import child_node, raw_value
from grpokit.config.point import PointSpec
from grpokit.problems import Problem, note

ARR = "actor_rollout_ref"
GPUS = "the point's GPUs: cluster.gpus_per_node x cluster.nodes"


def check(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """Every check of this module on one composed point (``cfg``: verl's config of the point)."""
    problems = check_parallel(spec, cfg)
    problems += check_engine(spec, cfg)
    problems += check_paths(spec, cfg)
    problems += check_registered(spec, cfg)
    problems += check_memory_fraction(spec, cfg)
    problems += check_micro_batches(spec, cfg)
    problems += check_resume_contract(spec, cfg)
    return problems


def _get(cfg: DictConfig, key: str, default=None, *, follow: bool = True):
    """The value at ``key`` (dotted), resolved; ``default`` when missing or null.

    Walks OmegaConf's nodes without resolving the sections on the way (``OmegaConf.select`` parses
    the key and resolves every level, several times the cost, for every point of a sweep); only a
    leaf that is an interpolation is resolved. ``follow=False``: such a leaf gives ``default`` (it
    repeats another key, which is checked itself).
    """
    parent, _, leaf = key.rpartition(".")
    node = cfg
    for part in parent.split(".") if parent else ():
        node = child_node(node, part) if isinstance(node, DictConfig) else None
        if node is None or OmegaConf.is_interpolation(node) or raw_value(node) is None:
            return _slow_get(cfg, key, default)
    if not isinstance(node, DictConfig):
        return default
    child = child_node(node, leaf)  # a key this config lacks (Megatron's has no FSDP ones): None
    if child is None:
        return default
    if OmegaConf.is_interpolation(child):
        return node.get(leaf, default) if follow else default
    value = raw_value(child)
    return default if value is None else value


def _slow_get(cfg: DictConfig, key: str, default):
    value = OmegaConf.select(cfg, key, default=default, throw_on_resolution_failure=False)
    return default if value is None else value


@functools.cache
def _importable(package: str) -> bool:
    """``package`` imports in this environment (asked once per process)."""
    return importlib.util.find_spec(package) is not None


def n_gpus(cfg: DictConfig) -> int:
    """The trainer's GPUs: ``trainer.n_gpus_per_node`` x ``trainer.nnodes`` (as verl computes them)."""
    return int(_get(cfg, "trainer.n_gpus_per_node", 0)) * int(_get(cfg, "trainer.nnodes", 1))


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _uses_critic(cfg: DictConfig) -> bool:
    enable = _get(cfg, "critic.enable")
    return bool(enable) if enable is not None else str(_get(cfg, "algorithm.adv_estimator", "")) == "gae"


def check_parallel(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """Rollout TP x DP x PP and each Ulysses size must divide the trainer's GPUs.

    verl builds the rollout mesh ``(world // (tp*dp*pp), tp*dp, pp)`` and asserts the division
    (``verl/workers/engine_workers.py``); FSDP's Ulysses mesh is ``(world // sp, sp)``.
    """
    world = n_gpus(cfg)
    if world <= 0:
        return []  # no GPU for the trainer: grpokit.validate.gpu_plan says so
    problems = []
    sizes = {
        f"{ARR}.rollout.tensor_model_parallel_size": int(_get(cfg, f"{ARR}.rollout.tensor_model_parallel_size", 1)),
        f"{ARR}.rollout.data_parallel_size": int(_get(cfg, f"{ARR}.rollout.data_parallel_size", 1)),
        f"{ARR}.rollout.pipeline_model_parallel_size": int(_get(cfg, f"{ARR}.rollout.pipeline_model_parallel_size", 1)),
    }
    infer = sizes[f"{ARR}.rollout.tensor_model_parallel_size"]
    infer *= sizes[f"{ARR}.rollout.data_parallel_size"] * sizes[f"{ARR}.rollout.pipeline_model_parallel_size"]
    if world % infer:
        key = next((k for k, v in sizes.items() if v > 1), f"{ARR}.rollout.tensor_model_parallel_size")
        parts = " x ".join(f"{k.rsplit('.', 1)[1]} {v}" for k, v in sizes.items() if v > 1)
        problems.append(
            Problem(
                spec.name,
                f"verl.{key}",
                f"the rollout needs {parts} = {infer} GPUs per engine, which does not divide the point's "
                f"{world} GPU(s) (verl: rollout world_size {world} is not divisible by infer_world_size {infer})",
                f"set verl.{key} so that the product divides {world} (one of {_divisors(world)}), "
                f"or ask for more GPUs ({GPUS} = a multiple of {infer})",
            )
        )
    sp_keys = [
        f"{ARR}.{role}.{where}ulysses_sequence_parallel_size"
        for role in ("actor", "ref")
        for where in ("", "fsdp_config.")
    ]
    if _uses_critic(cfg):
        sp_keys += ["critic.ulysses_sequence_parallel_size", "critic.fsdp.ulysses_sequence_parallel_size"]
    for key in sp_keys:
        sp = _get(cfg, key, follow=False)  # ref's ${oc.select:...actor...} repeats the actor's key
        if sp is None or isinstance(sp, bool) or not isinstance(sp, int) or sp <= 1 or world % sp == 0:
            continue
        problems.append(
            Problem(
                spec.name,
                f"verl.{key}",
                f"Ulysses size {sp} does not divide the point's {world} GPU(s) (FSDP's mesh would have "
                f"dp = {world} // {sp} = {world // sp})",
                f"set verl.{key} to one of {_divisors(world)}, or ask for more GPUs ({GPUS} = a multiple of {sp})",
            )
        )
    return problems


def check_engine(spec: PointSpec, cfg: DictConfig, installed=None) -> list[Problem]:
    """``rollout.name``: one verl registers, and whose package the job's environment has.

    The job runs in this environment (the kit's virtual environment on shared storage). Where it
    has none of verl's rollout engines (a login node without the training stack) the package check
    is left to the job, which validates the point again on its node; an engine other than verl's
    default is then said once. ``installed(package) -> bool`` defaults to "it imports here".
    """
    from grpokit.validate.verl_registries import ENGINE_PACKAGES, registries

    installed = installed or _importable
    name = str(_get(cfg, f"{ARR}.rollout.name", ""))
    key = f"verl.{ARR}.rollout.name"
    known = registries().get("rollout")
    if known and name not in known:
        return [Problem(spec.name, key, f"verl has no rollout {name!r}", f"set {key} to one of {', '.join(known)}")]
    package = ENGINE_PACKAGES.get(name)
    if package is None or installed(package):
        return []
    present = [n for n, p in ENGINE_PACKAGES.items() if installed(p)]
    if not present:
        if name != "vllm":  # verl's default engine: the training stack's, not a choice to remark on
            note(f"no rollout engine is installed here: {key}={name} is checked by the job on its node")
        return []
    return [
        Problem(
            spec.name,
            key,
            f"{name} is not installed in the job's environment ({package} does not import; "
            f"it has {', '.join(present)})",
            f"set {key}={present[0]}, or pip install {name} into the kit's environment",
        )
    ]


def _local(path: str) -> bool:
    """A file-system path (not a hub id such as ``Qwen/Qwen3-8B`` or an ``hdfs://`` URL)."""
    return path.startswith(("/", "./", "../", "~"))


def check_paths(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """Paths the trainer opens at start: a LoRA adapter, a tokenizer, the reward function's file, the
    multi-turn tool config (multi-turn on), the critic's model (critic used), the reward model (enabled)."""
    keys = [f"{ARR}.model.lora_adapter_path", f"{ARR}.model.tokenizer_path", "reward.custom_reward_function.path"]
    if bool(_get(cfg, f"{ARR}.rollout.multi_turn.enable", False)):
        keys += [f"{ARR}.rollout.multi_turn.tool_config_path"]
    if _uses_critic(cfg):
        keys += ["critic.model.path", "critic.model.tokenizer_path"]
    if bool(_get(cfg, "reward.reward_model.enable", False)):
        keys += ["reward.reward_model.model_path"]
    problems = []
    for key in keys:
        value = _get(cfg, key)
        if value is None or not str(value) or not _local(str(value)):
            continue
        if not Path(os.path.expanduser(str(value))).exists():
            problems.append(
                Problem(
                    spec.name,
                    f"verl.{key}",
                    f"{value} does not exist (the trainer opens it at start)",
                    f"point verl.{key} at an existing folder, or drop it",
                )
            )
    return problems


#: (verl key, registry of :mod:`grpokit.validate.verl_registries`, what verl says at run time).
_REGISTERED = (
    ("algorithm.adv_estimator", "adv_estimator", "Unknown advantage estimator at step 1's advantage"),
    (f"{ARR}.actor.policy_loss.loss_mode", "policy_loss", "Unsupported loss mode at the first update"),
)


def check_registered(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """The advantage estimator, policy loss and reward manager: names verl registers."""
    keys = [key for key, _, _ in _REGISTERED]
    if str(_get(cfg, "reward.reward_manager.source", "register")) == "register":
        keys.append(REWARD_MANAGER_KEY)
    problems = []
    for key in keys:
        found = unregistered(key, _get(cfg, key))
        if found:
            problems.append(Problem(spec.name, f"verl.{key}", *found))
    return problems


#: The reward manager's name, looked up in verl's reward-loop registry when its source is ``register``.
REWARD_MANAGER_KEY = "reward.reward_manager.name"


def unregistered(key: str, value) -> tuple[str, str] | None:
    """(message, fix) when ``value`` of verl ``key`` is a name verl does not register; None when it
    does, when ``key`` names no registry (:data:`_REGISTERED`, :data:`REWARD_MANAGER_KEY`), or when the
    installed verl lacks the registry."""
    import difflib

    from grpokit.validate.verl_registries import registries

    checks = {k: (registry, when) for k, registry, when in _REGISTERED}
    checks[REWARD_MANAGER_KEY] = ("reward_manager", "Unknown reward manager at start")
    if key not in checks or value is None:
        return None
    registry, when = checks[key]
    known = registries().get(registry)
    if not known or str(value) in known:
        return None
    close = difflib.get_close_matches(str(value), known, n=1)  # a registered name, spelt: one meaning
    hint = f"did you mean {close[0]}? " if close else ""
    return (
        f"verl registers no {registry.replace('_', ' ')} {value!r} (verl: {when})",
        f"{hint}set verl.{key} to one of {', '.join(known)}",
    )


def check_memory_fraction(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """vLLM's ``gpu_memory_utilization`` must be in (0, 1] (vLLM's ``CacheConfig`` at engine start)."""
    key = f"{ARR}.rollout.gpu_memory_utilization"
    value = _get(cfg, key)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or 0 < value <= 1:
        return []
    return [
        Problem(
            spec.name,
            f"verl.{key}",
            f"{value} is not a fraction of the GPU's memory (vLLM's CacheConfig takes (0, 1] at engine start)",
            f"set verl.{key} to a fraction such as 0.6",
        )
    ]


def check_micro_batches(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """``actor.ppo_micro_batch_size_per_gpu`` must divide the mini batch per GPU.

    verl's formula (``ray_trainer.py``, ``engine_workers.py``): ``ppo_mini_batch_size x rollout.n``
    sequences per mini batch, split over ``n_gpus // ulysses_sequence_parallel_size`` data-parallel
    ranks; ``prepare_micro_batches`` asserts that the micro batch divides that. Dynamic batch
    sizes (``use_dynamic_bsz``) split by tokens instead and are not checked.
    """
    actor = f"{ARR}.actor"
    micro = _get(cfg, f"{actor}.ppo_micro_batch_size_per_gpu")
    world = n_gpus(cfg)
    if micro is None or bool(_get(cfg, f"{actor}.use_dynamic_bsz", False)) or world <= 0:
        return []
    sp = max(int(_get(cfg, f"{actor}.{where}ulysses_sequence_parallel_size", 1) or 1) for where in ("", "fsdp_config."))
    dp = max(world // max(sp, 1), 1)
    mini = int(_get(cfg, f"{actor}.ppo_mini_batch_size", 0)) * int(_get(cfg, f"{ARR}.rollout.n", 1))
    per_gpu = mini // dp
    if per_gpu <= 0 or per_gpu % int(micro) == 0:
        return []
    fits = [d for d in range(1, per_gpu + 1) if per_gpu % d == 0]
    return [
        Problem(
            spec.name,
            f"verl.{actor}.ppo_micro_batch_size_per_gpu",
            f"{micro} does not divide the mini batch per GPU, ppo_mini_batch_size x rollout.n / "
            f"(GPUs / Ulysses size) = {mini} / {dp} = {per_gpu} "
            "(verl's prepare_micro_batches fails at the first update)",
            f"set verl.{actor}.ppo_micro_batch_size_per_gpu to one of {', '.join(map(str, fits[-6:]))}",
        )
    ]


def check_resume_contract(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """The kit requeues a preempted or timed-out job and verl resumes from its newest checkpoint.

    On Slurm, ``trainer.resume_mode=disable`` would restart every requeued attempt from step 0
    (refused; a local run is never requeued, and the reference run's own list sets it);
    ``save_freq`` that saves nothing before the last step leaves a requeued attempt nothing to resume
    from (noted); a checkpoint folder that cannot be created is refused (verl fails at its first save).
    """
    problems = []
    mode = str(_get(cfg, "trainer.resume_mode", "auto"))
    if mode == "disable" and spec.cluster.kind == "slurm":  # a local run is never requeued
        problems.append(
            Problem(
                spec.name,
                "verl.trainer.resume_mode",
                "disable: a requeued job (preemption, time limit) would start again from step 0 and overwrite "
                "its checkpoints; the kit's requeue-and-resume needs verl to resume",
                "drop verl.trainer.resume_mode (auto: resume from the newest checkpoint, if any)",
            )
        )
    save_freq = _get(cfg, "trainer.save_freq")
    steps = _get(cfg, "trainer.total_training_steps")
    if isinstance(save_freq, int) and spec.cluster.kind == "slurm":
        if save_freq <= 0:
            note(
                f"verl.trainer.save_freq={save_freq}: verl saves no checkpoint, so a job requeued "
                "after a preemption or its time limit starts again from step 0; set verl.trainer.save_freq>0 to resume"
            )
        elif isinstance(steps, int) and save_freq >= steps > 1:
            note(
                f"verl.trainer.save_freq={save_freq} >= total_training_steps={steps}: the only "
                "checkpoint is the last step's, so a job requeued before the end starts again from step 0"
            )
    folder = _get(cfg, "trainer.default_local_dir")
    if folder is not None and not _creatable(Path(str(folder))):
        problems.append(
            Problem(
                spec.name,
                "verl.trainer.default_local_dir",
                f"{folder} cannot be created here (no writable folder above it)",
                "set verl.trainer.default_local_dir (or checkpoint_root=) to a writable folder on a file system "
                "every node mounts",
            )
        )
    return problems


def _creatable(folder: Path) -> bool:
    """``folder`` exists as a writable folder, or its nearest existing ancestor is one."""
    path = folder.expanduser().absolute()
    while not path.exists():
        if path.parent == path:
            return False
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)
