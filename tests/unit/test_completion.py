"""``completed`` means the target step was reached with a final checkpoint (issue 12 item 6).

Checkpoints are written by the trainer TEST DOUBLE's ``save`` (verl 0.9.1's layout); the rule is
checked against verl's own fit loop source, so a verl upgrade that changes it fails here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from grpokit.runtime.decisions.completion import judge, total_steps_from_log

REPO = Path(__file__).resolve().parents[2]


def _double():
    spec = importlib.util.spec_from_file_location("fake_trainer_c", REPO / "tests" / "doubles" / "fake_verl_trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


double = _double()


def ckpts(tmp_path: Path, *steps: int, partial: int | None = None) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for step in steps:
        double.save(ckpt, step, world=2, crash_in_save=None)
    if partial is not None:  # shards written, data.pt and tracker not (a save killed half-way)
        (ckpt / f"global_step_{partial}" / "actor").mkdir(parents=True)
        (ckpt / f"global_step_{partial}" / "actor" / "model_world_size_2_rank_0.pt").write_bytes(b"x")
    return ckpt


def test_verl_fit_loop_still_saves_at_the_last_step_only_with_positive_save_freq():
    source = Path(importlib.util.find_spec("verl.trainer.ppo.ray_trainer").origin).read_text()
    assert "is_last_step = self.global_steps >= self.total_training_steps" in source
    save = re.search(r"if self\.config\.trainer\.save_freq > 0 and \(\s*is_last_step", source)
    assert save, "verl's save condition changed: revisit grpokit/runtime/decisions/completion.py"
    assert 'print(f"Total training steps: {self.total_training_steps}")' in source
    assert "drop_last=True" in source  # the train dataloader's last partial batch is dropped


def test_target_reached_with_final_checkpoint_is_completed(tmp_path):
    done = judge(target_step=10, save_freq=5, last_step=10, ckpt_dir=ckpts(tmp_path, 5, 10))
    assert (done.state, done.ended_by, done.reason) == ("completed", "completed", "")


def test_exit_0_at_step_2_of_10_is_an_early_exit_naming_steps_and_checkpoint(tmp_path):
    ckpt = ckpts(tmp_path, 2)
    done = judge(target_step=10, save_freq=2, last_step=2, ckpt_dir=ckpt, attempt="attempts/1")
    assert (done.state, done.ended_by) == ("failed", "early_exit")
    assert "exited 0 at step 2 (attempts/1/metrics.jsonl) of target_step 10" in done.reason
    assert f"newest complete checkpoint global_step_2 in {ckpt}" in done.reason
    assert "resubmit.py" in done.reason


def test_exit_0_without_a_step_or_checkpoint_is_an_early_exit(tmp_path):
    done = judge(target_step=10, save_freq=-1, last_step=None, ckpt_dir=tmp_path / "none")
    assert done.ended_by == "early_exit"
    assert "without logging a step" in done.reason and "no complete checkpoint" in done.reason
    assert "save_freq=-1: verl saves none" in done.reason


def test_target_reached_without_saving_configured_is_completed(tmp_path):
    # save_freq -1 (verl's default) never saves: no checkpoint is required
    assert judge(target_step=4, save_freq=-1, last_step=4, ckpt_dir=tmp_path / "none").state == "completed"
    assert judge(target_step=4, save_freq=None, last_step=4, ckpt_dir=tmp_path / "none").state == "completed"


def test_target_reached_but_final_save_missing_or_partial_is_not_completed(tmp_path):
    ckpt = ckpts(tmp_path, 4, 8, partial=10)
    done = judge(target_step=10, save_freq=4, last_step=10, ckpt_dir=ckpt)
    assert (done.state, done.ended_by) == ("failed", "no_final_checkpoint")
    assert "newest complete checkpoint global_step_8" in done.reason and "not the final step 10" in done.reason


def test_a_resumed_attempt_that_finds_the_final_checkpoint_is_completed(tmp_path):
    # the previous attempt saved the last step and was killed before writing its status
    assert judge(target_step=4, save_freq=2, last_step=None, ckpt_dir=ckpts(tmp_path, 2, 4)).state == "completed"


def test_unknown_target_uses_the_checkpoint_rule_only(tmp_path):
    ckpt = ckpts(tmp_path, 3)
    assert judge(target_step=None, save_freq=3, last_step=3, ckpt_dir=ckpt).state == "completed"
    assert judge(target_step=None, save_freq=3, last_step=5, ckpt_dir=ckpt).ended_by == "no_final_checkpoint"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(TaskRunner pid=1) Size of train dataloader: 2\n(TaskRunner pid=1) Total training steps: 60\n", 60),
        ("no count here\n", None),
    ],
)
def test_total_steps_from_verls_print(tmp_path, text, expected):
    log = tmp_path / "trainer.log"
    log.write_text(text)
    assert total_steps_from_log(log) == expected
    assert total_steps_from_log(tmp_path / "absent.log") is None
