"""The kit's own checks on a composed point: files exist, derived lengths are consistent, no verl
setting pair known to crash verl's trainer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpokit.config.point import WANDB_MODES, PointSpec
from grpokit.config.schema import ClusterConf, PruningRules, RuntimeConf
from grpokit.paths import kit_command
from grpokit.problems import Problem


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
    for key in ("data.train_files", "data.val_files"):
        for path in _paths(OmegaConf.select(cfg, key)):
            if not Path(path).is_file():
                problems.append(
                    Problem(spec.name, f"verl.{key}", f"data file {path} does not exist", data_hint(task, key, path))
                )
    model_path = Path(str(cfg.actor_rollout_ref.model.path))
    if not (model_path / "config.json").is_file():
        key, hint = model_hint(spec, cfg)
        problems.append(Problem(spec.name, key, f"no model at {model_path} (config.json missing)", hint))
    return problems


#: The files ``prepare_data.py <task> --out DIR`` writes (every task).
PREPARED_FILES = ("train.parquet", "test.parquet")


def _preparable(task: str) -> bool:
    """Whether ``prepare_data.py`` writes ``task``'s files (a ``grpokit.tasks.<task>.data`` module)."""
    try:
        return importlib.util.find_spec(f"grpokit.tasks.{task}.data") is not None
    except (ImportError, ValueError):
        return False


def data_hint(task: str, key: str, path: str) -> str:
    """The fix for a missing data file, naming the path as given (typed, or the experiment's
    ``data_dir``): the prepare command writing that very file, else a check of the path; for a task the
    kit cannot prepare (a verl script's own data, ``experiment=verl_script``), the path itself."""
    file = Path(path)
    if not _preparable(task):  # a verl script's own file (verl_script=)
        return f"put the data file at {path}, or set verl.{key} to an existing file"
    prepare = kit_command("prepare-data", f"{task} --out {file.parent}")
    if file.name in PREPARED_FILES:
        return prepare
    return f"check verl.{key}={path} ({prepare} writes {' and '.join(PREPARED_FILES)} there)"


def model_hint(spec: PointSpec, cfg: DictConfig) -> tuple[str, str]:
    """(the key to name, the fix) for the point's model folder: ``model.path`` and
    :func:`download_hint` when the folder is the kit's model's; ``verl.actor_rollout_ref.model.path``
    and that folder when the user typed verl's key (a verl launch script's own path)."""
    path = str(cfg.actor_rollout_ref.model.path)
    if Path(path) == Path(str(spec.model.get("path"))):
        return "model.path", download_hint(spec)
    key = "verl.actor_rollout_ref.model.path"
    return key, (
        f"put a Hugging Face model folder at {path} (e.g. hf download <hub id> --local-dir {path}), or set {key} to one"
    )


def download_hint(spec: PointSpec) -> str:
    """The command that fetches (or builds) the point's model."""
    model = spec.model
    if model.get("source") == "build":
        return kit_command("make-tiny-model", f"--out {model.get('path')}")
    last = {o.split("=", 1)[0]: o for o in spec.kit_overrides if o.startswith(("model=", "model."))}
    choice = " ".join(last.values())
    return kit_command("download", choice) + f"  (fetches {model.get('hub_id')} to {model.get('path')})"


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


def check_fused_kernels(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """Refuse verl's fused logits with padding kept: ``actor_rollout_ref.model.use_fused_kernels=true``
    with ``use_remove_padding=false``.

    Measured (issue 15, docs/performance.md): with that pair verl 0.9.1's FSDP engine got log-probs
    of a shape it does not expect and the job failed in the first ``compute_log_prob``
    (``IndexError: tuple index out of range`` in
    ``verl/workers/engine/fsdp/transformer_impl.py::prepare_model_outputs``), on Qwen3.5 on one
    H200, after about 8 minutes of start-up. Returns one Problem, or none.
    """
    model = cfg.actor_rollout_ref.model
    if not (bool(model.get("use_fused_kernels")) and not bool(model.get("use_remove_padding"))):
        return []
    return [
        Problem(
            spec.name,
            "verl.actor_rollout_ref.model.use_fused_kernels",
            "fused kernels with use_remove_padding=false crash verl 0.9.1 in the first compute_log_prob "
            "(IndexError in the fused logits path with padding kept)",
            "set verl.actor_rollout_ref.model.use_fused_kernels=false, or "
            "verl.actor_rollout_ref.model.use_remove_padding=true (needs flash-attn)",
        )
    ]


def check_cluster(spec: PointSpec) -> list[Problem]:
    """The request's own and related fields (``signal_delay_s`` < the time limit, ...):
    :meth:`grpokit.config.schema.ClusterConf.problems`."""
    return ClusterConf.of(spec.cluster).problems(spec.name)


def check_runtime(spec: PointSpec) -> list[Problem]:
    """The ``runtime.*`` keys as the job would read them: the watchdog's limits and Ray's sizing
    (:meth:`grpokit.config.schema.RuntimeConf.problems`), pruning rules, W&B's mode."""
    runtime = RuntimeConf.of(spec.runtime)
    problems = runtime.problems(spec.name)
    try:  # the job's pruning watcher reads these (grpokit.runtime.processes.pruning)
        PruningRules.from_runtime(runtime)
    except ValueError as exc:
        key, _, what = str(exc).partition(" ")
        fix = "the rules and their defaults: grpokit.config.schema.PruningRules"
        problems.append(Problem(spec.name, key.rstrip(":"), what, fix))
    mode = runtime.wandb_mode
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
