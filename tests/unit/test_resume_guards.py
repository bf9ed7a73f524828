"""Checks before a resume: the checkpoint's GPU count, and the folder's visibility from every node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpokit.runtime.decisions.resume_from import ResumeRefused, check_world_size
from grpokit.runtime.processes import shared_fs


def verl_checkpoint(ckpt: Path, step: int, world: int) -> None:
    """A complete verl FSDP checkpoint (layout of verl 0.9.1, see grpokit.runtime.decisions.checkpoints)."""
    actor = ckpt / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for rank in range(world):
        for kind in ("model", "optim", "extra_state"):
            torch.save({}, actor / f"{kind}_world_size_{world}_rank_{rank}.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    (actor / "huggingface" / "config.json").write_text("{}")
    torch.save({}, ckpt / f"global_step_{step}" / "data.pt")
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_same_world_size_resumes(tmp_path: Path):
    verl_checkpoint(tmp_path, 4, world=4)
    assert check_world_size(tmp_path, nnodes=2, gpus_per_node=2) == 4
    assert check_world_size(tmp_path / "empty", nnodes=1, gpus_per_node=1) is None


def test_another_world_size_is_refused_with_the_fix_and_nothing_changes(tmp_path: Path):
    verl_checkpoint(tmp_path, 2, world=2)
    verl_checkpoint(tmp_path, 4, world=2)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ResumeRefused) as err:
        check_world_size(tmp_path, nnodes=1, gpus_per_node=1)
    text = str(err.value)
    assert "global_step_4 was saved by 2 GPU ranks (model_world_size_2_rank_*.pt)" in text
    assert "trains on 1 (trainer.nnodes=1 x trainer.n_gpus_per_node=1)" in text
    assert "resume with the same GPU count (2 GPUs in all)" in text and "start a fresh point" in text
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_the_newest_complete_step_decides(tmp_path: Path):
    verl_checkpoint(tmp_path, 2, world=1)
    verl_checkpoint(tmp_path, 4, world=2)
    (tmp_path / "global_step_4" / "data.pt").unlink()  # step 4 is partial: step 2 is resumed
    assert check_world_size(tmp_path, nnodes=1, gpus_per_node=1) == 2


def _probe(path: Path, token: str, within: float = 0.5) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "grpokit.runtime.processes.shared_fs", str(path), token, f"--within={within}"],
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("GRPOKIT_SHARED_FS ")]
    return json.loads(line.split(" ", 1)[1])


def test_the_node_side_probe_tells_seen_missing_and_different(tmp_path: Path):
    token_file = tmp_path / ".grpokit-shared-check"
    token_file.write_text("abc")
    assert _probe(token_file, "abc")["visible"]
    other = _probe(token_file, "xyz")
    assert not other["visible"] and "holds another token" in other["detail"]
    gone = _probe(tmp_path / "nope", "abc")
    assert not gone["visible"] and "does not exist" in gone["detail"]
    no_dir = _probe(tmp_path / "no_dir" / "t", "abc")
    assert "folder" in no_dir["detail"] and "does not exist there" in no_dir["detail"]


def test_the_reason_names_the_folder_the_nodes_and_the_fix(tmp_path: Path):
    text = shared_fs.problem(tmp_path, "node1", {"node2": "x does not exist"})
    assert str(tmp_path) in text and "node1" in text and "node2: x does not exist" in text
    assert "Fix: set checkpoint_root" in text and "every node" in text
    cmd = shared_fs.probe_command(["node2", "node3"], tmp_path / "t", "tok", 10)
    assert cmd[:6] == ["srun", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=node2,node3"]
