"""The length task (experiment=length_grpo, the GPU smoke's learning proof): its reward, how verl
loads it from the composed experiment, and the check that the reward rose (bench/smoke_check.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from verl.trainer.ppo.reward import get_custom_reward_fn

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.paths import package_file
from grpokit.run_folder.metrics import read_jsonl
from grpokit.tasks.length.reward import compute_score
from grpokit.validate import validate_point

SMOKE_CHECK = Path(__file__).resolve().parents[2] / "bench" / "smoke_check.py"


def test_shorter_responses_score_higher_linearly_down_to_zero():
    assert compute_score("openai/gsm8k", "", "18", None) == {"score": 1.0, "chars": 0.0}
    assert compute_score("openai/gsm8k", "x" * 128, "18", None, max_chars=512)["score"] == 0.75
    assert compute_score("openai/gsm8k", "x" * 512, "18", None, max_chars=512)["score"] == 0.0
    assert compute_score("openai/gsm8k", "x" * 900, "18", None, max_chars=512) == {"score": 0.0, "chars": 900.0}
    short, long = (
        compute_score("s", t, None, None, max_chars=64)["score"] for t in ("The answer", "The answer is 18.")
    )
    assert short > long


@pytest.mark.parametrize("bad", [0, -5, 2.5, "512", True])
def test_a_bad_max_chars_names_the_key(bad):
    with pytest.raises(ValueError, match=r"reward_kwargs.max_chars=.* must be a positive integer"):
        compute_score("s", "text", None, None, max_chars=bad)


def _learn_point(base: list[str]):
    # the smoke's `learn` phase: bench/gpu_smoke.sh learn_phase's overrides (data and logs from the test)
    overrides = [
        *base,
        "cluster=local",
        "hardware=h200",
        "experiment=length_grpo",
        "verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.1",
        "verl.actor_rollout_ref.rollout.enforce_eager=true",
        "+verl.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=2147483648",
        "++verl.actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "+runtime.env.VLLM_USE_FLASHINFER_SAMPLER=0",
    ]
    return build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})


def test_the_learn_phase_point_validates_and_verl_loads_the_length_reward(base):
    cfg, problems = validate_point(_learn_point(base))
    assert problems == []
    assert cfg.trainer.total_training_steps == 20 and cfg.data.train_batch_size == 4
    assert cfg.actor_rollout_ref.rollout.n == 8 and cfg.data.max_response_length == 64
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-3
    crf = cfg.reward.custom_reward_function
    assert crf.path == str(package_file("tasks/length/reward.py")) and crf.reward_kwargs.max_chars == 64 * 4
    fn = get_custom_reward_fn(cfg)  # verl's own loader: imports the file by path, binds reward_kwargs
    assert fn(data_source="openai/gsm8k", solution_str="x" * 128, ground_truth="18", extra_info={}) == {
        "score": 0.5,
        "chars": 128.0,
    }


@pytest.fixture(scope="module")
def smoke_check():
    spec = importlib.util.spec_from_file_location("smoke_check", SMOKE_CHECK)
    module = importlib.util.module_from_spec(spec)
    sys.modules["smoke_check"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("smoke_check", None)


def _metrics(tmp_path: Path, scores: list[float | None]) -> list[dict]:
    """A metrics.jsonl as the kit merges verl's file logger (``{"step", "data"}`` records), read back."""
    path = tmp_path / "metrics.jsonl"
    lines = []
    for step, score in enumerate(scores, start=1):
        data = {"response_length/mean": 64.0 - step, "timing_s/step": 4.0}
        if score is not None:
            data["critic/score/mean"] = score
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    return read_jsonl(path)


def test_the_check_passes_a_rising_reward(smoke_check, tmp_path):
    # the CPU replay of experiment=length_grpo (docs/gpu-smoke.md): flat near 0, then rising
    scores = [0.0, 0.078, 0.016, 0.023, 0.017, 0.0, 0.043, 0.024, 0.078, 0.029]
    scores += [0.098, 0.116, 0.047, 0.184, 0.295, 0.287, 0.383, 0.491, 0.494, 0.612]
    got = smoke_check.learning(_metrics(tmp_path, scores), steps=20, window=5, margin=0.05)
    assert got["first"] == pytest.approx(0.0268) and got["last"] == pytest.approx(0.4534)


def test_the_check_fails_a_flat_or_falling_reward_naming_the_key_and_the_curve(smoke_check, tmp_path):
    flat = [0.42, 0.43] * 10
    with pytest.raises(smoke_check.CheckFailed, match=r"critic/score/mean did not rise: .*\+0\.00\d\d < 0\.05"):
        smoke_check.learning(_metrics(tmp_path, flat), steps=20, window=5, margin=0.05)
    falling = [0.6 - 0.01 * i for i in range(20)]
    with pytest.raises(smoke_check.CheckFailed, match="did not rise"):
        smoke_check.learning(_metrics(tmp_path, falling), steps=20, window=5, margin=0.05)


def test_the_check_fails_when_a_step_has_no_score(smoke_check, tmp_path):
    scores: list[float | None] = [0.4] * 20
    scores[6] = None
    with pytest.raises(smoke_check.CheckFailed, match=r"no critic/score/mean at step\(s\) \[7\]"):
        smoke_check.learning(_metrics(tmp_path, scores), steps=20, window=5, margin=0.05)
    with pytest.raises(smoke_check.CheckFailed, match="windows would overlap"):
        smoke_check.learning(_metrics(tmp_path, [0.4] * 8), steps=8, window=5, margin=0.05)


def test_the_rehearsal_trainer_calls_the_length_reward_with_typed_kwargs(gsm8k_dir):
    # rehearse=true runs the experiment's reward once with the command line's values, as verl's would
    from grpokit.rehearsal.rehearsal_trainer import call_reward

    cfg = {
        "reward.custom_reward_function.path": str(package_file("tasks/length/reward.py")),
        "reward.custom_reward_function.name": "compute_score",
        "reward.custom_reward_function.reward_kwargs.max_chars": "512",  # text on the command line, int for verl
        "data.val_files": str(gsm8k_dir / "test.parquet"),
    }
    got = call_reward(cfg)
    assert set(got) == {"reward/score", "reward/chars"} and 0 < got["reward/score"] < 1
