"""The node's kernel choices (grpokit.runtime.processes.kernels): vLLM's Triton Gated-DeltaNet prefill
backend when FlashInfer is missing (issue 15; measured on one H200 with vLLM 0.24.0)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import signal
from pathlib import Path

import pytest

from grpokit.config.point import PointSpec
from grpokit.runtime.decisions.outcome import JobFailed
from grpokit.runtime.processes import kernels, trainer
from grpokit.runtime.processes.kernels import (
    GDN_BACKEND_KEY,
    check_node,
    fla_problem,
    has_linear_attention,
    kernel_overrides,
)

TRITON = f"++{GDN_BACKEND_KEY}=triton"


def model(tmp_path: Path, config: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.fixture
def spec(bare_point):
    """``spec(verl_overrides)``: a one-GPU point with these verl overrides."""

    def make(overrides: list[str]) -> PointSpec:
        return bare_point(Path("/tmp/x"), 0, {"gpus_per_node": 1}, verl_overrides=overrides)

    return make


QWEN35 = {"model_type": "qwen3_5", "text_config": {"layer_types": ["linear_attention", "full_attention"]}}


def test_triton_backend_is_chosen_for_a_linear_attention_model_without_flashinfer(tmp_path: Path, spec) -> None:
    point = spec([f"actor_rollout_ref.model.path={model(tmp_path, QWEN35)}"])
    assert kernel_overrides(point, flashinfer=False) == [TRITON]
    assert kernel_overrides(point, flashinfer=True) == []
    # the trainer command carries it (this test machine has no FlashInfer)
    assert TRITON in trainer.command(point, [])


def test_the_points_own_backend_and_models_without_linear_attention_are_left_alone(tmp_path: Path, spec) -> None:
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


# flash-linear-attention on Hopper (issue 15, seen on one H200 on 2026-12-01 with torch 2.11's
# Triton 3.6.0: fla 0.6.0 raised in the actor's first backward pass, after ~8 minutes of start-up).
H200_FLA = {"fla_version": "0.6.0", "triton_version": "3.6.0", "tilelang": False, "compute_capability": "9.0"}


def test_fla_on_hopper_with_an_older_triton_is_named_with_the_fix() -> None:
    line = fla_problem(**H200_FLA)
    assert line is not None and "\n" not in line
    assert "Triton 3.6.0" in line and "uninstall flash-linear-attention and fla-core" in line
    assert "tilelang" in line and ">= 3.7.1" in line


def test_fla_is_fine_with_a_new_triton_with_tilelang_off_hopper_or_not_installed() -> None:
    assert fla_problem(**{**H200_FLA, "triton_version": "3.7.1"}) is None
    assert fla_problem(**{**H200_FLA, "triton_version": "3.3.1"}) is None  # before the bad range
    assert fla_problem(**{**H200_FLA, "tilelang": True}) is None
    assert fla_problem(**{**H200_FLA, "compute_capability": "8.0"}) is None  # A100
    assert fla_problem(**{**H200_FLA, "fla_version": ""}) is None  # not installed
    assert fla_problem(**{**H200_FLA, "compute_capability": ""}) is None  # no GPU answered


def test_the_job_fails_before_the_trainer_starts_only_for_linear_attention_models(tmp_path: Path, spec) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    qwen35 = spec([f"actor_rollout_ref.model.path={model(tmp_path / 'a', QWEN35)}"])
    line = fla_problem(**H200_FLA)
    with pytest.raises(JobFailed) as failed:
        check_node(qwen35, fla=line)
    assert str(failed.value) == line and failed.value.ended_by == "failed"
    qwen3 = spec([f"actor_rollout_ref.model.path={model(tmp_path / 'b', {'model_type': 'qwen3'})}"])
    check_node(qwen3, fla=line)  # no Gated-DeltaNet layers to train: nothing raised
    check_node(qwen35, fla=None)
    check_node(qwen35)  # this test machine: no fla installed, no GPU


def _lifecycle_module():
    """tests/unit/test_driver_lifecycle.py: its point, its stand-ins for Ray, sidecars and trainer."""
    path = Path(__file__).with_name("test_driver_lifecycle.py")
    module_spec = importlib.util.spec_from_file_location("driver_lifecycle_for_kernels", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_the_driver_ends_the_attempt_with_the_line_and_starts_no_trainer(
    tmp_path: Path, monkeypatch, bare_point
) -> None:
    lifecycle = _lifecycle_module()
    saved = {s: signal.getsignal(s) for s in lifecycle.STOP_SIGNALS}
    (tmp_path / "m").mkdir()
    point = lifecycle.make_spec(bare_point, tmp_path)
    point = dataclasses.replace(
        point, verl_overrides=[*point.verl_overrides, f"actor_rollout_ref.model.path={model(tmp_path / 'm', QWEN35)}"]
    )
    line = fla_problem(**H200_FLA)
    monkeypatch.setattr(kernels, "fla_problem", lambda: line)  # this machine has no GPU and no fla
    try:
        r = lifecycle.run_attempt(point)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert r.trainers == [], "no trainer started"
    assert r.status["state"] == "failed" and line in r.status["reason"]
    assert r.code != 0
