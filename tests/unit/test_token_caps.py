"""bench/token_caps.py: the memory and time model behind the h200 profile's token caps (issue 26)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.validate import validate_point

BENCH = Path(__file__).resolve().parents[2] / "bench" / "token_caps.py"


@pytest.fixture(scope="module")
def caps():
    spec = importlib.util.spec_from_file_location("token_caps", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["token_caps"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("token_caps", None)


def test_the_model_reproduces_the_measured_step_it_was_calibrated_on(caps):
    # cap 3,072 with 1,109-token sequences (prompt mean 85 + 1,024): 2 per micro batch, 32 micro batches
    split = caps.micro_batches(3072, 64, 70_968 / 64, 1163)
    assert (split.count, split.seqs, split.padded) == (32, 2, 2326)
    assert caps.predict_update_gib(split.padded) == pytest.approx(37_761 / 1024, abs=0.01)
    assert caps.predict_update_s(split, 70_968) == pytest.approx((64.8 + 61.8) / 2, abs=0.01)
    assert caps.predict_log_prob_s(split, 70_968) == pytest.approx((18.5 + 16.2 + 17.6 + 18.9) / 4, abs=0.01)
    # generation: vLLM's 0.3 of the H200 plus what the actor keeps = the measured 55,243 MiB
    assert caps.predict_generation_gib(143_771) == pytest.approx(55_243 / 1024, abs=0.01)


def test_the_second_measured_step_sets_the_update_slope_and_its_time_was_predicted(caps):
    # cap 6,144 (2026-12-05): 5 sequences a micro batch, 13 micro batches; the update's time was a
    # prediction of the first step's calibration (39.3 s) and measured 38.7 / 39.5 s
    split = caps.micro_batches(6144, 64, 70_968 / 64, 1163)
    assert (split.count, split.padded) == (13, 5815)
    assert caps.predict_update_gib(split.padded) == pytest.approx(85_665 / 1024, abs=0.01)
    assert caps.predict_update_s(split, 70_968) == pytest.approx((38.7 + 39.5) / 2, abs=1.0)
    # the older micro-benchmark slope underestimated the step's peak by about 20 GiB
    assert caps.UPDATE_GIB_PER_TOKEN > 1.5 * caps.RESERVED_PER_ALLOCATED * caps.FB_GIB_PER_TOKEN


def test_beyond_the_measured_caps_the_update_line_is_conservative(caps):
    # not a calibration point: the older profile's 12,288 cap (a text-only model) peaked at 109.7 GB;
    # the line through the two measured steps predicts more, never less
    split = caps.micro_batches(12_288, 64, 70_968 / 64, 1163)
    assert split.count == 6
    assert caps.predict_update_gib(split.padded) > 109.7e9 / 2**30
    assert 25 < caps.predict_update_s(split, 70_968) < 35


def test_a_cap_below_the_longest_sequence_is_refused_as_verl_does(caps):
    with pytest.raises(ValueError, match="below the longest sequence"):
        caps.micro_batches(1024, 64, 1109, 1163)


def test_the_update_cap_is_the_largest_that_fits_the_profile_s_gpu_memory(caps, base):
    cfg = compose_kit([*base, "hardware=h200"])
    assert cfg.hardware.gpu_memory_gb == caps.PROFILE_BUDGET_GB == 96
    budget = caps.PROFILE_BUDGET_GB * 1e9 / 2**30
    upd = caps.largest_cap("update", budget)
    assert upd.multiple == caps.PROFILE_UPDATE_MULTIPLE == 4
    assert upd.peak_gib < budget and upd.worst_gib < budget
    assert caps.predict_update_gib(caps.micro_batches(5 * 1536, 64, 1536, 1536).padded) > budget
    # an 80 GB card: one sequence less per micro batch (what performance.md advises there)
    assert caps.largest_cap("update", 80e9 / 2**30).multiple == 3
    lp = caps.largest_cap("log_prob", budget)
    assert lp.multiple >= caps.PROFILE_LOG_PROB_MULTIPLE
    worst = caps.micro_batches(caps.PROFILE_LOG_PROB_MULTIPLE * 1536, 64, 1536, 1536)
    assert caps.predict_log_prob_gib(worst.padded) < budget
    step = caps.predict_step(4 * 1536, 12 * 1536)
    assert step["update_actor"] < 63.3 and step["old_log_prob"] < 17.8 and step["step"] < 103.5


def test_the_h200_profile_sets_the_modelled_caps_and_verl_accepts_them(base, caps):
    overrides = [*base, "hardware=h200"]
    cfg, problems = validate_point(build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={}))
    assert problems == []
    arr = cfg.actor_rollout_ref
    assert arr.actor.use_dynamic_bsz and arr.rollout.log_prob_use_dynamic_bsz and arr.ref.log_prob_use_dynamic_bsz
    seq = cfg.data.max_prompt_length + cfg.data.max_response_length
    assert arr.actor.ppo_max_token_len_per_gpu == caps.PROFILE_UPDATE_MULTIPLE * seq == 6144
    assert arr.rollout.log_prob_max_token_len_per_gpu == caps.PROFILE_LOG_PROB_MULTIPLE * seq == 18_432
    assert arr.ref.log_prob_max_token_len_per_gpu == 18_432
