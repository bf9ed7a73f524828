"""Which of verl's FSDP checkpoints under ``trainer.default_local_dir`` are complete.

Layout (verl 0.9.1, ``verl/trainer/ppo/ray_trainer.py::_save_checkpoint`` and
``verl/utils/checkpoint/fsdp_checkpoint_manager.py::save_checkpoint``)::

    <ckpt_dir>/latest_checkpointed_iteration.txt      N, written last (skipped with async_save)
    <ckpt_dir>/global_step_N/data.pt                  dataloader state, written after the actor
    <ckpt_dir>/global_step_N/actor/model_world_size_W_rank_R.pt        every rank R < W
    <ckpt_dir>/global_step_N/actor/optim_world_size_W_rank_R.pt
    <ckpt_dir>/global_step_N/actor/extra_state_world_size_W_rank_R.pt
    <ckpt_dir>/global_step_N/actor/fsdp_config.json   {"FSDP_version": 1|2, "world_size": W} (rank 0)
    <ckpt_dir>/global_step_N/actor/huggingface/config.json  model config + tokenizer (rank 0)

A job killed during a save leaves a ``global_step_N`` without some of these; the tracker file can
still name a step whose folder was pruned or is partial.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")
SHARD_RE = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")
SHARD_KINDS = ("model", "optim", "extra_state")


@dataclass(frozen=True)
class CheckpointInfo:
    """One ``global_step_N`` folder.

    step: N. path: the ``global_step_N`` folder. complete: every file listed in the module
    docstring is present. problems: human-readable reasons when not complete (empty when complete).
    world_size: W read from fsdp_config.json, else from the shard names (None when neither).
    tracked: the tracker file names this step.
    """

    step: int
    path: Path
    complete: bool
    problems: list[str] = field(default_factory=list)
    world_size: int | None = None
    tracked: bool = False

    @property
    def actor_dir(self) -> Path:
        """The folder verl's model merger reads (``--local_dir``)."""
        return self.path / "actor"


def read_tracker(ckpt_dir: Path | str) -> int | None:
    """The step in ``latest_checkpointed_iteration.txt``; None when absent or not an integer."""
    path = Path(ckpt_dir) / TRACKER_FILE
    if not path.exists():
        return None
    text = path.read_text().strip()
    try:
        return int(text)
    except ValueError:
        log.warning("%s holds %r, not a step number", path, text)
        return None


def _check_actor(actor: Path) -> tuple[list[str], int | None]:
    """Problems found in ``global_step_N/actor`` and the world size used."""
    if not actor.is_dir():
        return [f"missing {actor}"], None
    problems: list[str] = []
    shards: dict[tuple[str, int], set[int]] = {}
    for p in actor.iterdir():
        m = SHARD_RE.match(p.name)
        if m:
            shards.setdefault((m.group(1), int(m.group(2))), set()).add(int(m.group(3)))

    cfg_world: int | None = None
    cfg_path = actor / "fsdp_config.json"
    if cfg_path.exists():
        try:
            cfg_world = int(json.loads(cfg_path.read_text())["world_size"])
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{cfg_path} has no readable world_size ({exc!r})")
    else:
        # The merger reads world_size from this file (verl/model_merger/fsdp_model_merger.py).
        problems.append(f"missing {cfg_path}")

    name_worlds = sorted({w for (_, w) in shards})
    if cfg_world is not None:
        world = cfg_world
        stray = [w for w in name_worlds if w != cfg_world]
        if stray:
            problems.append(f"shards for world size {stray} next to fsdp_config.json's world_size {cfg_world}")
    elif len(name_worlds) == 1:
        world = name_worlds[0]
    else:
        if name_worlds:
            problems.append(f"shards of several world sizes {name_worlds} and no fsdp_config.json")
        else:
            problems.append(f"no model/optim/extra_state shard files in {actor}")
        return problems, None

    for kind in SHARD_KINDS:
        have = shards.get((kind, world), set())
        missing = [r for r in range(world) if r not in have]
        if missing:
            problems.append(f"missing {kind}_world_size_{world}_rank_R.pt for ranks {missing} in {actor}")
    if not (actor / "huggingface" / "config.json").exists():
        problems.append(f"missing {actor / 'huggingface' / 'config.json'} (written by rank 0 on every save)")
    return problems, world


def inspect_checkpoint(step_dir: Path | str, tracked: bool = False) -> CheckpointInfo:
    """Check one ``global_step_N`` folder (see the module docstring for what complete means)."""
    step_dir = Path(step_dir)
    m = STEP_DIR_RE.match(step_dir.name)
    if not m:
        raise ValueError(f"{step_dir}: not a verl checkpoint folder (expected global_step_N)")
    problems, world = _check_actor(step_dir / "actor")
    if not (step_dir / "data.pt").exists():
        problems.insert(0, f"missing {step_dir / 'data.pt'} (the dataloader state, saved after the actor)")
    return CheckpointInfo(
        step=int(m.group(1)),
        path=step_dir,
        complete=not problems,
        problems=problems,
        world_size=world,
        tracked=tracked,
    )


def list_checkpoints(ckpt_dir: Path | str) -> list[CheckpointInfo]:
    """Every ``global_step_N`` under ``ckpt_dir`` (a run folder's ``checkpoints``), sorted by step.

    When the tracker file names a step whose folder is missing, an entry with complete=False and
    the problem spelled out is included, so callers can report it. A missing ``ckpt_dir`` gives [].
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    tracked = read_tracker(ckpt_dir)
    infos = [
        inspect_checkpoint(p, tracked=(tracked == int(STEP_DIR_RE.match(p.name).group(1))))
        for p in ckpt_dir.iterdir()
        if p.is_dir() and STEP_DIR_RE.match(p.name)
    ]
    if tracked is not None and all(i.step != tracked for i in infos):
        missing = ckpt_dir / f"global_step_{tracked}"
        infos.append(
            CheckpointInfo(
                step=tracked,
                path=missing,
                complete=False,
                tracked=True,
                problems=[f"{ckpt_dir / TRACKER_FILE} names step {tracked} but {missing} does not exist"],
            )
        )
    for info in infos:
        if info.tracked and not info.complete:
            log.warning(
                "tracker file of %s points at incomplete step %d: %s",
                ckpt_dir,
                info.step,
                "; ".join(info.problems),
            )
    return sorted(infos, key=lambda i: i.step)


def latest_complete(ckpt_dir: Path | str) -> CheckpointInfo | None:
    """The complete checkpoint with the highest step, or None when there is none."""
    complete = [i for i in list_checkpoints(ckpt_dir) if i.complete]
    return complete[-1] if complete else None
