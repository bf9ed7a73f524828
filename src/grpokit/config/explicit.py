"""verl settings the kit derives per point, when the user also typed them.

The kit sets five of verl's ``trainer.*`` keys for every point: ``default_local_dir`` (the point's
checkpoint folder), ``project_name`` / ``experiment_name`` (the sweep's and the point's names),
``nnodes`` and ``n_gpus_per_node`` (from the Slurm request, ``cluster.nodes`` and
``cluster.gpus_per_node`` less the GPUs of dedicated sidecars). A value the user typed for one of
them (``verl.trainer.n_gpus_per_node=8``) is never silently replaced:

- ``default_local_dir``, ``project_name``, ``experiment_name``: honoured as typed (two points
  sharing one checkpoint folder are refused by the sweep's validation);
- ``nnodes``, ``n_gpus_per_node``: honoured when equal to what the job is given, else refused
  with the ``cluster.*`` key that sets them (verl cannot use GPUs Slurm did not allocate).
"""

from __future__ import annotations

from typing import Any, NoReturn

from omegaconf import DictConfig, OmegaConf

from grpokit.problems import Problem, SweepValidationError

#: The ``cluster.*`` key a job-shape setting comes from, with how it is derived.
_FROM_CLUSTER = {
    "trainer.nnodes": ("cluster.nodes", "the job's nodes"),
    "trainer.n_gpus_per_node": (
        "cluster.gpus_per_node",
        "the GPUs Slurm gives each node, less those of dedicated sidecars",
    ),
}


def typed_verl_keys(kit_overrides: list[str]) -> dict[str, str]:
    """``{verl key: value as typed}`` of the ``verl.*`` overrides (``+``/``++`` stripped; last wins)."""
    out = {}
    for item in kit_overrides:
        key, sep, value = item.partition("=")
        key = key.lstrip("+")
        if sep and key.startswith("verl."):
            out[key[len("verl.") :]] = value
    return out


def refuse_replaced(cfg: DictConfig, point: str, typed: dict[str, str], derived: dict[str, Any]) -> None:
    """Refuse a typed ``nnodes`` / ``n_gpus_per_node`` that differs from the job's shape.

    Raises:
        SweepValidationError: one problem per such key, naming the ``cluster.*`` key to set instead.
    """
    problems = []
    for key, (cluster_key, what) in _FROM_CLUSTER.items():
        if key not in typed:
            continue
        value = OmegaConf.select(cfg, f"verl.{key}")
        if value != derived[key]:
            want = value
            if key == "trainer.n_gpus_per_node" and isinstance(value, int):
                want = value + int(cfg.cluster.gpus_per_node) - int(derived[key])  # + dedicated sidecar GPUs
            problems.append(
                Problem(
                    point,
                    f"verl.{key}",
                    f"{value} differs from {what} ({derived[key]}), which the kit passes to verl",
                    f"drop verl.{key} and set {cluster_key}={want}",
                )
            )
    if problems:
        raise SweepValidationError(problems)


def raise_unresolvable(exc: Exception, point: str, kit_overrides: list[str]) -> NoReturn:
    """A derived setting that cannot be computed: name the typed key behind it when one is visible.

    Raises:
        SweepValidationError: always.
    """
    derived_key = getattr(exc, "full_key", None) or "verl"
    message = str(exc).splitlines()[0]
    key = derived_key
    for item in kit_overrides:
        typed_key, sep, value = item.lstrip("+~").partition("=")
        if sep and value and f"'{value}'" in message:
            key = typed_key
            break
    else:  # a null typed on a key the derived one reads (verl.data.train_batch_size=null -> max_num_seqs)
        nulls = [k for k, _, v in (i.lstrip("+~").partition("=") for i in kit_overrides) if v in ("null", "~")]
        if nulls and "NoneType" in message:
            key = nulls[-1]
            fix = f"set {key} to a value: {derived_key} is derived from it"
            raise SweepValidationError([Problem(point, key, f"null leaves {derived_key} nothing to derive", fix)])
    fix = f"set {key} to a value of the right type" if key != derived_key else f"check {key} and what it derives from"
    raise SweepValidationError([Problem(point, key, f"{derived_key} cannot be computed: {message}", fix)])


#: verl's data caps (rows read from the train / validation files; -1 reads every row).
DATA_CAPS = ("data.train_max_samples", "data.val_max_samples")


def data_caps(spec) -> str | None:
    """A line naming the point's data caps and the override that lifts them; None without caps."""
    caps = [(key, spec.verl_value(key)) for key in DATA_CAPS]
    caps = [(k, v) for k, v in caps if v not in (None, "-1", "null")]
    if not caps:
        return None
    set_ = ", ".join(f"verl.{k}={v}" for k, v in caps)
    lift = " ".join(f"verl.{k}=-1" for k, _ in caps)
    return f"data caps: {set_}; to read every row: {lift}"


#: verl's deprecated global micro-batch keys and their ``_per_gpu`` twins (verl refuses both set:
#: "You have set both ... Please remove ... because only ..._per_gpu is supported";
#: ``verl/workers/config/actor.py``, ``critic.py``, ``verl/utils/config.py::check_mutually_exclusive``).
MICRO_BATCH_TWINS = {
    "actor_rollout_ref.actor.ppo_micro_batch_size": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size": "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"
    ),
    "critic.ppo_micro_batch_size": "critic.ppo_micro_batch_size_per_gpu",
    "critic.forward_micro_batch_size": "critic.forward_micro_batch_size_per_gpu",
}


def yield_presets(emitted: list[str], typed: dict[str, str]) -> tuple[list[str], list[str]]:
    """The kit's preset yields to a micro-batch key the user typed (its deprecated global form).

    A hardware profile sets ``..._per_gpu`` (``consumer_24gb``: 1); a user who types the global
    twin (``verl.actor_rollout_ref.actor.ppo_micro_batch_size=8``, as verl's older example scripts
    do) did not set both, so the profile's ``_per_gpu`` value is dropped (verl's default, null) and
    the user's key is kept. A ``_per_gpu`` key the user typed too stays (verl then refuses the pair,
    which the user did create). Returns (emitted overrides, one notice per yielded preset).
    """
    dropped, notices = set(), []
    for global_key, per_gpu in MICRO_BATCH_TWINS.items():
        if typed.get(global_key, "null") in ("null", "None", "") or per_gpu in typed:
            continue
        if any(o.split("=", 1)[0] == per_gpu and o.split("=", 1)[1] != "null" for o in emitted):
            dropped.add(per_gpu)
            notices.append(
                f"verl.{global_key}={typed[global_key]} typed: the hardware profile's verl.{per_gpu} "
                "is dropped (verl takes one of the two; yours wins)"
            )
    return [o for o in emitted if o.split("=", 1)[0] not in dropped], notices
