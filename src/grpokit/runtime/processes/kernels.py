"""Kernel choices the job makes from what is installed on the node it runs on.

vLLM picks FlashInfer's Gated-DeltaNet prefill kernel for Qwen3.5 (and other models with
linear-attention layers) on Hopper; without the ``flashinfer`` package its engine core dies at
start (``ModuleNotFoundError: No module named 'flashinfer'``, qwen_gdn_linear_attn.py) and verl
ends much later with a replay-buffer error. Measured on one H200 (vLLM 0.24.0, 2026-12-01): vLLM's
Triton backend, ``additional_config.gdn_prefill_backend=triton``, runs the same model. The job
chooses it when FlashInfer is absent, unless the point set the backend itself.

The FSDP actor's Gated-DeltaNet layers run in transformers, which uses flash-linear-attention
(``fla``) whenever it is installed. fla 0.6.0 refuses the backward pass on Hopper with Triton
>= 3.4 and < 3.7.1 (wrong results, fla issue #640) unless tilelang is installed; torch 2.11 pins
Triton 3.6.0. Seen on one H200 (2026-12-01): the run fails at its first actor update, after ~8
minutes of start-up. The job checks for that combination before the trainer starts and fails at
once with the fix (:func:`check_node`, :func:`fla_problem`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

from grpokit.config.point import PointSpec
from grpokit.runtime.decisions.outcome import JobFailed
from grpokit.slurm import gpus

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


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_compute_capability() -> str | None:
    """The first visible GPU's compute capability (``"9.0"``) from ``nvidia-smi``, without
    creating a CUDA context in this process; None when there is no GPU or no answer in 10 s."""
    return gpus.compute_capability()


def fla_problem(
    *,
    fla_version: str | None = None,
    triton_version: str | None = None,
    tilelang: bool | None = None,
    compute_capability: str | None = None,
) -> str | None:
    """One line naming the problem and the fix when flash-linear-attention cannot train here:
    fla installed, no tilelang, a Hopper GPU (compute capability 9.x) and Triton >= 3.4, < 3.7.1.
    None otherwise, or when any fact is unknown. Each argument defaults to what this node has."""
    fla_version = fla_version if fla_version is not None else _installed_version("fla-core")
    if fla_version is None:
        fla_version = _installed_version("flash-linear-attention")
    if not fla_version:
        return None
    if tilelang if tilelang is not None else importlib.util.find_spec("tilelang") is not None:
        return None
    triton_version = triton_version if triton_version is not None else _installed_version("triton")
    capability = compute_capability if compute_capability is not None else gpu_compute_capability()
    if not triton_version or not capability or not capability.startswith("9."):
        return None
    if not (3, 4, 0) <= _version_tuple(triton_version) < (3, 7, 1):
        return None
    return (
        f"flash-linear-attention {fla_version} is installed, and transformers uses it for the "
        f"actor's Gated-DeltaNet layers, but it refuses their backward pass on this Hopper GPU with "
        f"Triton {triton_version} (wrong results below 3.7.1, fla issue #640): uninstall "
        "flash-linear-attention and fla-core from the training environment (transformers then runs "
        "its PyTorch path), or install tilelang, or use a torch with Triton >= 3.7.1"
    )


def check_node(spec: PointSpec, *, fla: str | None = "check") -> None:
    """Before the trainer starts: raise :class:`~grpokit.runtime.decisions.outcome.JobFailed` with
    :func:`fla_problem`'s line when the point's model has linear-attention layers and this node's
    flash-linear-attention cannot train them (`fla`: that line, or ``"check"`` to ask
    :func:`fla_problem`, or None to skip)."""
    model = spec.verl_value("actor_rollout_ref.model.path")
    if not model or not has_linear_attention(model):
        return
    problem = fla_problem() if fla == "check" else fla
    if problem:
        raise JobFailed(problem)


def kernel_overrides(spec: PointSpec, *, flashinfer: bool | None = None) -> list[str]:
    """verl overrides for the node's kernels: the Triton Gated-DeltaNet prefill backend when
    FlashInfer is missing and the model has linear-attention layers; [] otherwise or when the
    point sets ``gdn_prefill_backend`` itself. `flashinfer` defaults to :func:`flashinfer_installed`.
    """
    model = spec.verl_value("actor_rollout_ref.model.path")
    if not model or not has_linear_attention(model):
        return []
    if spec.verl_value(GDN_BACKEND_KEY) is not None:
        return []
    if flashinfer if flashinfer is not None else flashinfer_installed():
        return []
    return [f"++{GDN_BACKEND_KEY}=triton"]
