"""The point against its model checkpoint: positions (``config.json``) and the tokenizer's files.

vLLM refuses a ``max_model_len`` above what the model's config derives (``max_position_embeddings``
and its relatives, times a linear/dynamic/yarn rope-scaling factor) and verl cannot train a sequence
longer than that. A multimodal checkpoint (Qwen3.5, Qwen2.5-VL) keeps the language model's numbers
in ``text_config``. The tokenizer is loaded from ``actor_rollout_ref.model.tokenizer_path`` (the
model's folder when unset) by verl's first step on the cluster; its files are checked here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from grpokit.config.point import PointSpec
from grpokit.problems import Problem

# The keys vLLM reads for a model's maximum length (vllm/config/model.py, _get_and_verify_max_len).
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_SCALED_ROPE = {"linear", "dynamic", "yarn"}
#: Any one of these makes a loadable tokenizer (fast JSON, SentencePiece, BPE vocab, tiktoken).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt", "tokenizer.tiktoken")


def model_positions(config: dict[str, Any]) -> tuple[int | None, str]:
    """The most tokens one sequence may have, and where it came from (``config.json`` key).

    Example: ``model_positions({"text_config": {"max_position_embeddings": 262144}})
    == (262144, "text_config.max_position_embeddings")``.
    """
    for prefix, node in (("text_config.", config.get("text_config")), ("", config)):
        if not isinstance(node, dict):
            continue
        found = [(int(node[k]), k) for k in _LENGTH_KEYS if isinstance(node.get(k), int) and node[k] > 0]
        if not found:
            continue
        positions, key = min(found)
        rope = node.get("rope_scaling") or node.get("rope_parameters") or {}  # transformers 5: rope_parameters
        kind = rope.get("rope_type") or rope.get("type") if isinstance(rope, dict) else None
        factor = rope.get("factor") if isinstance(rope, dict) else None
        if kind in _SCALED_ROPE and isinstance(factor, (int, float)) and factor > 1:
            return int(positions * factor), f"{prefix}{key} x rope_scaling.factor {factor}"
        return positions, prefix + key
    return None, ""


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES) or any(folder.glob("*.tiktoken"))


def check_model(spec: PointSpec, cfg: DictConfig, fix_download: str, model_key: str = "model.path") -> list[Problem]:
    """Lengths against the model's positions, and the tokenizer's files; ``[]`` when no model is there.

    ``model_key`` and ``fix_download`` name the folder's key and how to fetch it
    (:func:`grpokit.validate.kit_checks.model_hint`).

    A missing ``config.json`` is :func:`grpokit.validate.kit_checks.check_files`' problem.
    """
    model_dir = Path(str(cfg.actor_rollout_ref.model.path))
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        return []
    problems: list[Problem] = []
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        return [Problem(spec.name, model_key, f"{config_file} is not readable JSON ({exc})", fix_download)]
    positions, source = model_positions(config)
    prompt, response = int(cfg.data.max_prompt_length), int(cfg.data.max_response_length)
    if positions is not None:
        if prompt + response > positions:
            problems.append(
                Problem(
                    spec.name,
                    "verl.data.max_response_length",
                    f"prompt {prompt} + response {response} = {prompt + response} tokens is more than the model "
                    f"holds ({positions}, config.json {source})",
                    f"set verl.data.max_response_length<={max(positions - prompt, 1)} "
                    "(or lower verl.data.max_prompt_length)",
                )
            )
        max_model_len = cfg.actor_rollout_ref.rollout.get("max_model_len")
        if max_model_len is not None and int(max_model_len) > positions and prompt + response <= positions:
            problems.append(
                Problem(
                    spec.name,
                    "verl.actor_rollout_ref.rollout.max_model_len",
                    f"{max_model_len} is more than the model's {positions} positions (config.json {source}); "
                    "vLLM refuses it",
                    f"set verl.actor_rollout_ref.rollout.max_model_len={positions} "
                    "(or lower experiment.model_len_margin)",
                )
            )
    tokenizer_path = cfg.actor_rollout_ref.model.get("tokenizer_path")
    tok_dir = Path(str(tokenizer_path)) if tokenizer_path else model_dir
    if not _has_tokenizer(tok_dir):
        key = "verl.actor_rollout_ref.model.tokenizer_path" if tokenizer_path else model_key
        problems.append(
            Problem(
                spec.name,
                key,
                f"no tokenizer in {tok_dir} (none of {', '.join(TOKENIZER_FILES[:3])}, ...)",
                fix_download if not tokenizer_path else "point it at a folder with the model's tokenizer files",
            )
        )
    return problems
