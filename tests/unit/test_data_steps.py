"""Enough training data for the point's steps (grpokit.validate.data_steps), on real GSM8K parquet
and verl's composed config: a batch-size sweep at GSM8K's train_max_samples=1024 and 48 steps is
refused at batch 32 (verl would stop at step 32) and accepted at 8 and 16."""

from __future__ import annotations

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.config.verl_schema import apply_overrides
from grpokit.validate import SweepValidationError, validate_points
from grpokit.validate.data_steps import check_data_steps, train_rows


def _point(base, *overrides):
    spec = build_point(compose_kit([*base, *overrides]), index=0, kit_overrides=list(overrides), swept={})
    return spec, apply_overrides(spec.verl_overrides)


def test_the_reference_settings_have_enough_data(base):
    spec, cfg = _point(base)
    assert train_rows(cfg) == 7473  # ../shared/data/gsm8k/train.jsonl, prepared
    assert check_data_steps(spec, cfg) == []


@pytest.mark.parametrize("batch", [21, 32, 64])
def test_a_batch_whose_data_runs_out_before_the_last_step_names_the_keys_that_lift_it(base, batch):
    spec, cfg = _point(base, f"verl.data.train_batch_size={batch}")
    problems = check_data_steps(spec, cfg)
    if batch == 21:  # 1024 // 21 = 48: exactly enough
        assert problems == []
        return
    (p,) = problems
    assert p.key == "verl.trainer.total_training_steps"
    assert f"48 steps of batch {batch} need {48 * batch} prompts" in p.message
    assert f"gives {1024 // batch} step(s)" in p.message and "train_max_samples=1024" in p.message
    assert f"verl.data.train_max_samples>={48 * batch}" in p.fix
    assert f"verl.trainer.total_epochs>={-(-48 // (1024 // batch))}" in p.fix


def test_more_epochs_or_a_larger_cap_lift_it_and_no_step_count_means_verls_epochs(base):
    for extra in (
        ["verl.data.train_max_samples=1536"],
        ["verl.trainer.total_epochs=2"],
        ["verl.trainer.total_training_steps=null"],
        ["verl.trainer.total_training_steps=32"],
    ):
        spec, cfg = _point(base, "verl.data.train_batch_size=32", *extra)
        assert check_data_steps(spec, cfg) == [], extra


def test_more_steps_than_the_whole_file_says_lower_the_steps(base):
    spec, cfg = _point(base, "verl.data.train_max_samples=-1", "verl.trainer.total_training_steps=1000")
    (p,) = check_data_steps(spec, cfg)
    assert "7473 rows in data.train_files" in p.message
    assert "only 7473 rows: lower the steps or the batch" in p.fix


def test_a_sweep_refuses_the_short_point_before_submission_and_only_it(base):
    from grpokit.submit.points import PointLoader, build_points

    points = [[*base, f"verl.data.train_batch_size={b}"] for b in (8, 16, 32)]
    specs = build_points(None, PointLoader(compose_kit, points[0]), points)
    with pytest.raises(SweepValidationError) as err:
        validate_points(specs)
    text = str(err.value)
    assert specs[2].name in text and "verl.trainer.total_training_steps" in text
    assert specs[0].name not in text and specs[1].name not in text
