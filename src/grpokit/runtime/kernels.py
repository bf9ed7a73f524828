"""Kernel choices the job makes from what is installed on the node it runs on.

vLLM picks FlashInfer's Gated-DeltaNet prefill kernel for Qwen3.5 (and other models with
linear-attention layers) on Hopper; without the ``flashinfer`` package its engine core dies at
start (``ModuleNotFoundError: No module named 'flashinfer'``, qwen_gdn_linear_attn.py) and verl
ends much later with a replay-buffer error. Measured on one H200 (vLLM 0.24.0, 2026-12-01): vLLM's
Triton backend, ``additional_config.gdn_prefill_backend=triton``, runs the same model. The job
chooses it when FlashInfer is absent, unless the point set the backend itself.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from grpokit.config.point import PointSpec

GDN_BACKEND_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.gdn_prefill_backend"


def has_linear_attention(model_dir: str | Path) -> bool:
    """True when the model's ``config.json`` (or its ``text_config``) has linear-attention layers."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    for node in (config.get("text_config") or {}, config):
        if "linear_attention" in (node.get("layer_types") or []):
            return True
    return False


def flashinfer_installed() -> bool:
    """True when ``import flashinfer`` would find the package in this interpreter."""
    return importlib.util.find_spec("flashinfer") is not None


def kernel_overrides(spec: PointSpec, *, flashinfer: bool | None = None) -> list[str]:
    """verl overrides for the node's kernels: the Triton Gated-DeltaNet prefill backend when
    FlashInfer is missing and the model has linear-attention layers; [] otherwise or when the
    point sets ``gdn_prefill_backend`` itself. `flashinfer` defaults to :func:`flashinfer_installed`.
    """
    if spec.verl_value(GDN_BACKEND_KEY) is not None:
        return []
    model = spec.verl_value("actor_rollout_ref.model.path")
    if not model or not has_linear_attention(model):
        return []
    if flashinfer if flashinfer is not None else flashinfer_installed():
        return []
    return [f"++{GDN_BACKEND_KEY}=triton"]
