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


def test_the_earlier_12288_cap_is_predicted_near_what_it_measured(caps):
    # not a calibration point: the older profile's 12,288 cap measured 109.7 GB peak and 27-28 s update
    split = caps.micro_batches(12_288, 64, 70_968 / 64, 1163)
    assert split.count == 6
    assert 100 < caps.predict_update_gib(split.padded) < 125
    assert 25 < caps.predict_update_s(split, 70_968) < 35


def test_a_cap_below_the_longest_sequence_is_refused_as_verl_does(caps):
    with pytest.raises(ValueError, match="below the longest sequence"):
        caps.micro_batches(1024, 64, 1109, 1163)


def test_the_chosen_caps_fit_80_gb_and_the_update_cap_is_the_largest_that_does(caps):
    budget = 80e9 / 2**30
    upd = caps.largest_cap("update", budget)
    assert upd.multiple == caps.PROFILE_UPDATE_MULTIPLE == 4
    assert upd.peak_gib < budget and upd.worst_gib < budget
    assert caps.predict_update_gib(5 * 1536) > budget  # the next multiple breaks 80 GB when sequences are full
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
