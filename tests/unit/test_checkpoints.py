"""grpokit.runtime.checkpoints: completeness of verl FSDP checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from grpokit.runtime.checkpoints import inspect_checkpoint, latest_complete, list_checkpoints, read_tracker


def make_ckpt(
    root: Path,
    step: int,
    world: int = 2,
    skip: tuple[str, ...] = (),
    fsdp_config: bool = True,
    data_pt: bool = True,
    hf: bool = True,
) -> Path:
    """A global_step_N folder with the file names verl's FSDPCheckpointManager.save_checkpoint writes."""
    step_dir = root / f"global_step_{step}"
    actor = step_dir / "actor"
    actor.mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        for rank in range(world):
            name = f"{kind}_world_size_{world}_rank_{rank}.pt"
            if name not in skip:
                torch.save({"rank": rank}, actor / name)
    if fsdp_config:
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    if hf:
        (actor / "huggingface").mkdir()
        (actor / "huggingface" / "config.json").write_text("{}")
    if data_pt:
        torch.save({"step": step}, step_dir / "data.pt")
    return step_dir


def test_complete_checkpoint(tmp_path):
    info = inspect_checkpoint(make_ckpt(tmp_path, 5, world=4))
    assert info.complete and info.problems == [] and info.world_size == 4 and info.step == 5
    assert info.actor_dir == tmp_path / "global_step_5" / "actor"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"data_pt": False}, "data.pt"),
        ({"skip": ("model_world_size_2_rank_1.pt",)}, "model_world_size_2_rank_R.pt for ranks [1]"),
        ({"skip": ("optim_world_size_2_rank_0.pt",)}, "optim_world_size_2_rank_R.pt for ranks [0]"),
        ({"skip": ("extra_state_world_size_2_rank_1.pt",)}, "extra_state"),
        ({"fsdp_config": False}, "fsdp_config.json"),
        ({"hf": False}, "huggingface"),
    ],
)
def test_incomplete_checkpoint_names_the_problem(tmp_path, kwargs, needle):
    info = inspect_checkpoint(make_ckpt(tmp_path, 3, **kwargs))
    assert not info.complete
    assert any(needle in p for p in info.problems), info.problems


def test_world_size_from_fsdp_config_catches_missing_ranks(tmp_path):
    # Shards of ranks 0-1 only, but the save ran on 4 GPUs: names alone would look complete.
    step_dir = make_ckpt(tmp_path, 2, world=2)
    (step_dir / "actor" / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 4}))
    info = inspect_checkpoint(step_dir)
    assert not info.complete
    assert any("ranks [0, 1, 2, 3]" in p for p in info.problems)


def test_world_size_from_names_without_fsdp_config(tmp_path):
    info = inspect_checkpoint(make_ckpt(tmp_path, 2, world=3, fsdp_config=False))
    assert info.world_size == 3 and not info.complete


def test_list_and_latest_complete_with_tracker_on_incomplete(tmp_path):
    make_ckpt(tmp_path, 10)
    make_ckpt(tmp_path, 20)
    make_ckpt(tmp_path, 30, data_pt=False)  # killed during the save
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("30")
    infos = list_checkpoints(tmp_path)
    assert [(i.step, i.complete, i.tracked) for i in infos] == [
        (10, True, False),
        (20, True, False),
        (30, False, True),
    ]
    assert latest_complete(tmp_path).step == 20
    assert read_tracker(tmp_path) == 30


def test_tracker_names_missing_folder(tmp_path):
    make_ckpt(tmp_path, 10)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("40\n")
    infos = list_checkpoints(tmp_path)
    assert infos[-1].step == 40 and not infos[-1].complete
    assert "does not exist" in infos[-1].problems[0]
    assert latest_complete(tmp_path).step == 10


def test_no_checkpoints(tmp_path):
    assert list_checkpoints(tmp_path / "absent") == []
    assert latest_complete(tmp_path) is None


def test_verl_reads_the_same_tracker(tmp_path):
    # verl's own resume helper agrees on which folder the tracker names.
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    make_ckpt(tmp_path, 7)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    assert Path(find_latest_ckpt_path(str(tmp_path))) == list_checkpoints(tmp_path)[0].path
