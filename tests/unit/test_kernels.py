"""The node's kernel choices (grpokit.runtime.kernels): vLLM's Triton Gated-DeltaNet prefill
backend when FlashInfer is missing (issue 15; measured on one H200 with vLLM 0.24.0)."""

from __future__ import annotations

import json
from pathlib import Path

from grpokit.config.point import PointSpec
from grpokit.runtime import trainer
from grpokit.runtime.kernels import GDN_BACKEND_KEY, has_linear_attention, kernel_overrides

TRITON = f"++{GDN_BACKEND_KEY}=triton"


def model(tmp_path: Path, config: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def spec(overrides: list[str]) -> PointSpec:
    return PointSpec(
        sweep_name="s",
        index=0,
        name="000",
        run_dir="/tmp/x",
        checkpoint_dir="/tmp/x/ckpt",
        kit_overrides=[],
        swept={},
        verl_overrides=overrides,
        experiment={},
        model={},
        cluster={"gpus_per_node": 1},
        runtime={},
        sidecars={},
    )


QWEN35 = {"model_type": "qwen3_5", "text_config": {"layer_types": ["linear_attention", "full_attention"]}}


def test_triton_backend_is_chosen_for_a_linear_attention_model_without_flashinfer(tmp_path: Path) -> None:
    point = spec([f"actor_rollout_ref.model.path={model(tmp_path, QWEN35)}"])
    assert kernel_overrides(point, flashinfer=False) == [TRITON]
    assert kernel_overrides(point, flashinfer=True) == []
    # the trainer command carries it (this test machine has no FlashInfer)
    assert TRITON in trainer.command(point, [])


def test_the_points_own_backend_and_models_without_linear_attention_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    qwen35 = model(tmp_path / "a", QWEN35)
    own = spec([f"actor_rollout_ref.model.path={qwen35}", f"+{GDN_BACKEND_KEY}=flashinfer"])
    assert kernel_overrides(own, flashinfer=False) == []
    (tmp_path / "b").mkdir()
    qwen3 = model(tmp_path / "b", {"model_type": "qwen3", "num_hidden_layers": 2})
    assert kernel_overrides(spec([f"actor_rollout_ref.model.path={qwen3}"]), flashinfer=False) == []
    assert kernel_overrides(spec([f"actor_rollout_ref.model.path={tmp_path / 'absent'}"]), flashinfer=False) == []


def test_text_only_and_wrapped_configs_are_both_read(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    assert has_linear_attention(model(tmp_path / "t", {"layer_types": ["linear_attention"]}))
    (tmp_path / "w").mkdir()
    assert has_linear_attention(model(tmp_path / "w", QWEN35))
