"""The kit's own checks on a composed point: files exist, derived lengths are consistent."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpokit.config.point import PointSpec
from grpokit.runtime.pruning import PruningRules
from grpokit.validate.problems import Problem

#: W&B's own modes, the values of ``runtime.wandb_mode`` (read in the job by grpokit.runtime.trackers).
WANDB_MODES = ("online", "offline", "disabled")


def _paths(value) -> list[str]:
    if value is None:
        return []
    if OmegaConf.is_list(value) or isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def check_files(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """Training and validation parquet files, and the model's ``config.json``."""
    problems = []
    task = spec.experiment.get("task", "<task>")
    data_dir = spec.experiment.get("data_dir", "<dir>")
    for key in ("data.train_files", "data.val_files"):
        for path in _paths(OmegaConf.select(cfg, key)):
            if not Path(path).is_file():
                problems.append(
                    Problem(
                        spec.name,
                        f"verl.{key}",
                        f"data file {path} does not exist",
                        f"python launch/prepare_data.py {task} --out {data_dir}",
                    )
                )
    model_path = Path(str(cfg.actor_rollout_ref.model.path))
    if not (model_path / "config.json").is_file():
        problems.append(
            Problem(
                spec.name,
                "model.path",
                f"no model at {model_path} (config.json missing)",
                download_hint(spec),
            )
        )
    return problems


def download_hint(spec: PointSpec) -> str:
    """The command that fetches (or builds) the point's model."""
    model = spec.model
    if model.get("source") == "build":
        return f"python launch/make_tiny_model.py --out {model.get('path')}"
    last = {o.split("=", 1)[0]: o for o in spec.kit_overrides if o.startswith(("model=", "model."))}
    choice = " ".join(last.values())
    return f"python launch/download.py {choice}".rstrip() + f"  (fetches {model.get('hub_id')} to {model.get('path')})"


def check_lengths(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """vLLM's context and the token caps must hold one whole sequence (prompt + response)."""
    need = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    caps = {
        "actor_rollout_ref.rollout.max_model_len": cfg.actor_rollout_ref.rollout.max_model_len,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu,
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": (
            cfg.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu
        ),
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": (
            cfg.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu
        ),
    }
    problems = []
    for key, value in caps.items():
        if value is not None and int(value) < need:
            problems.append(
                Problem(
                    spec.name,
                    f"verl.{key}",
                    f"{value} is less than max_prompt_length + max_response_length = {need}",
                    f"drop the explicit value (the kit derives it) or set verl.{key}>={need}",
                )
            )
    batch = int(cfg.data.train_batch_size)
    mini = int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size)
    if mini > batch:
        problems.append(
            Problem(
                spec.name,
                "verl.actor_rollout_ref.actor.ppo_mini_batch_size",
                f"mini batch {mini} is larger than the batch {batch}",
                "drop the explicit value (the kit uses the whole batch) or lower it",
            )
        )
    return problems


def check_cluster(spec: PointSpec) -> list[Problem]:
    """The warning signal must come after the job starts: ``signal_lead_s`` < the time limit."""
    cluster = spec.cluster
    if cluster.get("kind") != "slurm":
        return []
    limit_s = int(cluster.get("time_min", 0)) * 60
    lead = int(cluster.get("signal_lead_s", 0))
    if limit_s and lead >= limit_s - 60:
        return [
            Problem(
                spec.name,
                "cluster.signal_lead_s",
                f"the warning signal would come {lead} s before a {limit_s} s time limit, i.e. at once",
                f"raise cluster.time_min above {(lead + 60) // 60 + 1} or lower cluster.signal_lead_s",
            )
        ]
    return []


def check_runtime(spec: PointSpec) -> list[Problem]:
    """The hang watchdog's limits and Ray's sizing keys (``runtime.*``), as the job would read them."""
    runtime, problems = spec.runtime, []
    for key in ("hang_floor_s", "hang_step_multiple", "hang_startup_s"):
        value = runtime.get(key)
        if value is None:
            continue  # hang_floor_s: null turns the watchdog off; the others then have defaults
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if number is None or number < 0 or (number == 0 and key != "hang_floor_s"):
            problems.append(
                Problem(
                    spec.name,
                    f"runtime.{key}",
                    f"must be a positive number, got {value!r}",
                    "set a number > 0 (seconds, or a multiple of the step time); runtime.hang_floor_s=null "
                    "turns the no-progress watchdog off",
                )
            )
    try:  # the job's pruning watcher reads these (grpokit.runtime.pruning)
        PruningRules.from_runtime(runtime)
    except ValueError as exc:
        key, _, what = str(exc).partition(" ")
        problems.append(Problem(spec.name, key.rstrip(":"), what, "see runtime.pruning in configs/config.yaml"))
    fraction = runtime.get("ray_object_store_fraction")
    if fraction is not None and not (isinstance(fraction, int | float) and 0 < fraction <= 1):
        problems.append(
            Problem(
                spec.name,
                "runtime.ray_object_store_fraction",
                f"must be a fraction of the job's memory in (0, 1], got {fraction!r}",
                "e.g. 0.3 (Ray's own default fraction)",
            )
        )
    ports = runtime.get("ray_worker_ports")
    if ports is not None and not (isinstance(ports, int) and not isinstance(ports, bool) and ports >= 10):
        problems.append(
            Problem(
                spec.name,
                "runtime.ray_worker_ports",
                f"must be a whole number of ports >= 10, got {ports!r}",
                "null sizes it from the job's CPUs (3 per CPU, 200 to 4000)",
            )
        )
    mode = runtime.get("wandb_mode")
    if mode is not None and mode not in WANDB_MODES:
        problems.append(
            Problem(
                spec.name,
                "runtime.wandb_mode",
                f"must be one of {', '.join(WANDB_MODES)} or null, got {mode!r}",
                "offline on compute nodes without internet (then wandb sync <run>/wandb/offline-run-*)",
            )
        )
    return problems
