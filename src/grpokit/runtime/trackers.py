"""verl's experiment trackers across a point's attempts: the environment the trainer inherits.

verl 0.9.1's ``verl.utils.tracking.Tracking`` calls ``wandb.init(project=trainer.project_name,
name=trainer.experiment_name, entity=$WANDB_ENTITY, config=...)`` without a run id, so each attempt
of a requeued point would start a new W&B run. W&B reads the rest of ``wandb.init``'s arguments
from the environment (``wandb/env.py``), which the trainer and verl's Ray workers (the ``TaskRunner``
that owns ``Tracking``) inherit from the driver. Setting them makes every attempt of a point, requeues
and resubmissions included, write the same W&B run:

- ``WANDB_RUN_ID``: deterministic from the sweep name and the point's name (:func:`wandb_run_id`);
- ``WANDB_RESUME=allow``: the first attempt creates the run, later ones continue it;
- ``WANDB_RUN_GROUP``: the sweep name; ``WANDB_TAGS``: the swept values (:func:`wandb_tags`);
- ``WANDB_DIR``: the run folder, so offline runs land in ``<run>/wandb/offline-run-*`` (one folder
  per attempt, all with the same run id; ``wandb sync <run>/wandb/offline-run-*`` uploads them as
  one run);
- ``WANDB_MODE``: ``runtime.wandb_mode`` (``online``, ``offline`` for compute nodes without
  internet, ``disabled``) when set; ``disabled`` whenever ``wandb`` is not among verl's
  ``trainer.logger`` (no W&B process is started for nothing).

MLflow is not covered: verl attaches to ``$MLFLOW_RUN_ID`` only when that run already exists on the
tracking server (``mlflow.start_run(run_id=...)``) and MLflow chooses run ids itself, so an id
cannot be fixed in advance; each attempt of a point is a new MLflow run named after the point.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from grpokit.config.point import WANDB_MODES, PointSpec

#: W&B refuses these characters in a run id (``wandb/sdk/wandb_settings.py``, ``validate_run_id``).
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: W&B's limit on a tag's length (its API refuses longer tags).
TAG_MAX = 64


def wandb_run_id(sweep_name: str, point_name: str) -> str:
    """The W&B run id of a point: ``<sweep>-<NNN>-<hash>``, at most 64 characters, W&B's safe set.

    The same for every attempt and resubmission of the point (sweep name and point name are fixed
    once the sweep folder exists); the hash of both keeps points apart when the readable part is cut.
    A sweep folder deleted and made again under the same ``sweep_name`` continues the same runs.
    """
    digest = hashlib.sha256(f"{sweep_name}/{point_name}".encode()).hexdigest()[:10]
    index = point_name.split("_", 1)[0]
    readable = _ID_UNSAFE.sub("-", sweep_name).strip("-")[: 64 - len(index) - len(digest) - 2]
    return f"{readable}-{index}-{digest}" if readable else f"{index}-{digest}"


def wandb_tags(swept: dict[str, Any]) -> list[str]:
    """``key=value`` per swept key (the key's last part, as in the run folder's name), each cut to
    W&B's 64 characters; commas become ``;`` (``WANDB_TAGS`` is comma-separated)."""
    tags = []
    for key, value in swept.items():
        tag = f"{key.rsplit('.', 1)[-1]}={value}".replace(",", ";")
        tags.append(tag[:TAG_MAX])
    return tags


def environment(spec: PointSpec) -> dict[str, str]:
    """The W&B environment of the point's trainer (see the module docstring); ``{WANDB_MODE:
    disabled}`` alone when ``wandb`` is not among its loggers.

    Raises:
        ValueError: ``runtime.wandb_mode`` is not one of :data:`WANDB_MODES` or null.
    """
    mode = spec.runtime.wandb_mode
    if mode is not None and mode not in WANDB_MODES:
        raise ValueError(
            f"point {spec.name}: runtime.wandb_mode={mode!r} is not one of {', '.join(WANDB_MODES)} "
            "(or null: W&B's own, $WANDB_MODE or online); set runtime.wandb_mode=offline on nodes without internet"
        )
    if "wandb" not in spec.loggers():
        return {"WANDB_MODE": "disabled"}
    env = {
        "WANDB_RUN_ID": wandb_run_id(spec.sweep_name, spec.name),
        "WANDB_RESUME": "allow",
        "WANDB_RUN_GROUP": spec.sweep_name,
        "WANDB_DIR": str(spec.run_dir),
    }
    tags = wandb_tags(spec.swept)
    if tags:
        env["WANDB_TAGS"] = ",".join(tags)
    if mode is not None:
        env["WANDB_MODE"] = mode
    return env
