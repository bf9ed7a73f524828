"""grpokit.runtime.decisions.checkpoints: completeness of verl FSDP checkpoints."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import pytest
import torch

from grpokit.runtime.decisions.checkpoints import (
    MANIFEST,
    inspect_checkpoint,
    latest_complete,
    list_checkpoints,
    read_tracker,
    record_saved,
    torch_file_problem,
)
from grpokit.runtime.decisions.resume_from import prepare_resume

REPO = Path(__file__).resolve().parents[2]


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


# -- complete by content (issue 24 item 3): 0-byte and truncated files of real torch.save output ---------


def _cut(path: Path, size: int | None) -> None:
    """``truncate -s <size>`` (None: half the file)."""
    os.truncate(path, path.stat().st_size // 2 if size is None else size)


@pytest.mark.parametrize("size", [0, None], ids=["zeroed", "truncated-to-half"])
@pytest.mark.parametrize("rel", ["actor/model_world_size_2_rank_0.pt", "actor/optim_world_size_2_rank_1.pt", "data.pt"])
def test_a_damaged_torch_file_without_a_manifest_makes_the_step_incomplete(tmp_path, rel, size):
    step_dir = make_ckpt(tmp_path, 12)
    torch.save({"w": torch.arange(4096, dtype=torch.float32)}, step_dir / rel)  # a real tensor file
    assert inspect_checkpoint(step_dir).complete
    _cut(step_dir / rel, size)
    info = inspect_checkpoint(step_dir)
    assert not info.complete
    assert len(info.problems) == 1 and info.problems[0].startswith(str(step_dir / rel)), info.problems
    assert ("is empty (0 bytes)" if size == 0 else "damaged torch file") in info.problems[0]


def test_a_file_that_is_no_torch_file_is_named(tmp_path):
    step_dir = make_ckpt(tmp_path, 3)
    (step_dir / "data.pt").write_bytes(b"not a checkpoint")
    (problem,) = inspect_checkpoint(step_dir).problems
    assert (
        problem
        == f"{step_dir / 'data.pt'} is not a torch file (neither torch.save's zip archive nor a pickle; 16 bytes)"
    )


def test_the_header_check_reads_no_tensor_and_accepts_what_torch_loads(tmp_path):
    # torch.load agrees with the check on every file it accepts; and the check is the zip directory only
    step_dir = make_ckpt(tmp_path, 4)
    big = step_dir / "actor" / "model_world_size_2_rank_0.pt"
    torch.save({"w": torch.zeros(4_000_000)}, big)  # 16 MB
    t0 = time.perf_counter()
    assert torch_file_problem(big) is None
    assert time.perf_counter() - t0 < 0.05
    for path in step_dir.rglob("*.pt"):
        torch.load(path, weights_only=True)


def test_the_trainer_double_writes_real_torch_files(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "fake_trainer_ck", REPO / "tests" / "doubles" / "fake_verl_trainer.py"
    )
    double = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(double)
    double.save(tmp_path, 5, world=2, crash_in_save=None)
    assert latest_complete(tmp_path).step == 5
    assert torch.load(tmp_path / "global_step_5" / "data.pt", weights_only=True) == {"step": 5}
    shard = torch.load(tmp_path / "global_step_5" / "actor" / "optim_world_size_2_rank_1.pt", weights_only=True)
    assert shard["double"] == "optim" and shard["rank"] == 1


def test_the_manifest_records_sizes_once_the_tracker_names_the_step(tmp_path):
    step_dir = make_ckpt(tmp_path, 8)
    assert record_saved(tmp_path) is None and not (step_dir / MANIFEST).exists()  # no tracker yet: a save under way
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    assert record_saved(tmp_path) == 8
    recorded = json.loads((step_dir / MANIFEST).read_text())
    assert recorded["step"] == 8
    assert recorded["files"]["data.pt"] == (step_dir / "data.pt").stat().st_size
    assert len(recorded["files"]) == 2 * 3 + 3  # shards, fsdp_config.json, huggingface/config.json, data.pt
    (step_dir / MANIFEST).unlink()
    assert record_saved(tmp_path, seen=8) == 8 and not (step_dir / MANIFEST).exists()  # unchanged: nothing read


def test_with_a_manifest_sizes_decide_even_for_a_file_whose_header_is_whole(tmp_path):
    # a shard replaced by another whole torch file (a copy from another step, a rewrite cut short
    # and redone smaller): the header check passes it, the size recorded at save does not
    step_dir = make_ckpt(tmp_path, 8)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    record_saved(tmp_path)
    shard = step_dir / "actor" / "model_world_size_2_rank_1.pt"
    was = shard.stat().st_size
    torch.save({"w": torch.zeros(100)}, shard)
    assert torch_file_problem(shard) is None and shard.stat().st_size != was
    (problem,) = inspect_checkpoint(step_dir).problems
    assert problem == f"{shard} has {shard.stat().st_size} bytes, {was} at save ({MANIFEST})"
    _cut(shard, 0)
    assert inspect_checkpoint(step_dir).problems == [f"{shard} has 0 bytes, {was} at save ({MANIFEST})"]


def test_a_damaged_step_gets_no_manifest(tmp_path, caplog):
    step_dir = make_ckpt(tmp_path, 8)
    _cut(step_dir / "data.pt", 0)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    assert record_saved(tmp_path) == 8
    assert not (step_dir / MANIFEST).exists()
    assert f"checkpoint {step_dir} is not whole after its save: {step_dir / 'data.pt'} is empty" in caplog.text


def test_a_truncated_safetensors_file_is_found(tmp_path):
    from safetensors.torch import save_file

    step_dir = make_ckpt(tmp_path, 2)
    hf = step_dir / "actor" / "huggingface" / "model.safetensors"  # verl's save_contents with hf_model
    save_file({"w": torch.ones(1000)}, hf)
    assert inspect_checkpoint(step_dir).complete
    _cut(hf, hf.stat().st_size - 1)
    (problem,) = inspect_checkpoint(step_dir).problems
    assert problem.startswith(f"{hf} is truncated: its header needs")


def test_resume_sets_a_zeroed_newest_step_aside_and_resumes_the_previous(tmp_path, caplog):
    """The issue's case: ``truncate -s 0 global_step_12/actor/model_world_size_1_rank_0.pt``."""
    make_ckpt(tmp_path, 8, world=1)
    step12 = make_ckpt(tmp_path, 12, world=1)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("12")
    record_saved(tmp_path)
    _cut(step12 / "actor" / "model_world_size_1_rank_0.pt", 0)
    report = prepare_resume(tmp_path)
    assert report["resume_step"] == 8 and report["tracker_was"] == 12
    assert read_tracker(tmp_path) == 8
    (aside,) = report["set_aside"]
    assert Path(aside).name.startswith("global_step_12.incomplete-") and not step12.exists()
    assert report["note"] == (
        f"checkpoint global_step_12 set aside as {Path(aside).name}: "
        f"{step12 / 'actor' / 'model_world_size_1_rank_0.pt'} has 0 bytes, "
        f"{json.loads((Path(aside) / MANIFEST).read_text())['files']['actor/model_world_size_1_rank_0.pt']} "
        f"at save ({MANIFEST}); resuming from global_step_8"
    )
    moved = [r.getMessage() for r in caplog.records if "is incomplete" in r.getMessage()]
    assert len(moved) == 1 and "model_world_size_1_rank_0.pt has 0 bytes" in moved[0]


def test_resume_with_no_whole_step_left_trains_from_scratch_and_says_so(tmp_path):
    step = make_ckpt(tmp_path, 4, world=1)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    _cut(step / "data.pt", 0)
    report = prepare_resume(tmp_path)
    assert report["resume_step"] is None and not (tmp_path / "latest_checkpointed_iteration.txt").exists()
    assert report["note"].endswith(
        f"{step / 'data.pt'} is empty (0 bytes); no complete checkpoint: training from scratch"
    )
