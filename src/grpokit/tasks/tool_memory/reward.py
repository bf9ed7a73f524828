"""The tool_memory task's reward: tool reward + answer reward + format reward (at most 2.25).

Formula (the reference account's ``reward.py``; issue 6):

    tool_reward   = min(sum(extra_info["tool_rewards"]), 1.0)      # search 0.25, read target 0.75
    answer_reward = 1.0 if the target answer appears in the model's text (case-insensitive) else 0.0
    format_reward = 0.25 if "FINAL:" appears in the model's text else 0.0
    score         = tool_reward + answer_reward + format_reward
    tool_calls    = len(extra_info["tool_rewards"])                 # not a reward: a count for the metrics

``extra_info["tool_rewards"]`` is the list of per-call tool rewards that verl's ``ToolAgentLoop``
puts in the rollout's ``extra_fields``; the reward loop's manager (``naive``) merges those into
``extra_info`` before calling ``compute_score``.

The "model's text": ``solution_str`` is the decoded multi-turn response, which also holds the tool
responses the chat template wrapped in ``<tool_response>...</tool_response>`` (the Qwen3 /
Qwen3.5 / qwen3_coder templates). Reading the target memory would put the answer there, so by
default (``answer_scope="model"``) those blocks are removed before matching; an unterminated block
(a truncated response) is removed to the end. ``answer_scope="response"`` matches the whole
``solution_str`` as the reference does; set it with
``+reward.custom_reward_function.reward_kwargs.answer_scope=response``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from grpokit.paths import kit_command

log = logging.getLogger(__name__)

MAX_TOOL_REWARD = 1.0
ANSWER_REWARD = 1.0
FORMAT_REWARD = 0.25
FINAL_MARKER = "FINAL:"
MAX_SCORE = MAX_TOOL_REWARD + ANSWER_REWARD + FORMAT_REWARD

_TOOL_RESPONSE_BLOCK = re.compile(r"<tool_response>.*?(?:</tool_response>|\Z)", re.DOTALL)


def model_text(solution_str: str) -> str:
    """``solution_str`` without its ``<tool_response>`` blocks (the text the policy wrote)."""
    return _TOOL_RESPONSE_BLOCK.sub("", solution_str)


def _target_answer(ground_truth: Any) -> str:
    if isinstance(ground_truth, Mapping):
        if "target_answer" not in ground_truth:
            raise ValueError(
                f"reward_model.ground_truth has no 'target_answer' (keys: {sorted(ground_truth)}); "
                f"regenerate the data with `{kit_command('prepare-data', 'tool_memory')}`"
            )
        return str(ground_truth["target_answer"])
    if isinstance(ground_truth, str):
        return ground_truth
    raise ValueError(
        f"reward_model.ground_truth must be a dict with 'target_answer' or a string, got {type(ground_truth).__name__}"
    )


def _tool_rewards(extra_info: Mapping[str, Any] | None) -> list[float]:
    rewards = (extra_info or {}).get("tool_rewards")
    if rewards is None:
        return []
    if not isinstance(rewards, Iterable):
        raise ValueError(f"extra_info['tool_rewards'] must be a list of floats, got {rewards!r}")
    return [float(r) for r in rewards if r is not None]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    answer_scope: Literal["model", "response"] = "model",
    **kwargs: Any,
) -> dict[str, float]:
    """Score one rollout; verl's custom reward function signature.

    Args:
        data_source: the row's ``data_source`` (unused; any source is scored the same way).
        solution_str: the decoded response (all turns after the prompt).
        ground_truth: ``reward_model.ground_truth``: ``{"target_answer": str, "target_id": str}``
            (a bare answer string is accepted too).
        extra_info: the row's ``extra_info`` merged with the agent loop's extra fields;
            ``tool_rewards`` (list of floats) is read, missing means 0.
        answer_scope: "model" (default) matches the answer outside ``<tool_response>`` blocks,
            "response" in the whole ``solution_str``.

    Returns:
        ``{"score", "tool_reward", "answer_reward", "format_reward", "tool_calls"}`` (floats; score
        in [0, 2.25]). ``tool_calls`` is the number of tool calls the rollout executed (one
        ``tool_rewards`` entry each), not part of the score. verl logs every key as its own metric
        (validation: ``val-aux/<data_source>/<key>/mean@N``); verl 0.9.1 has no tool-call count of
        its own.

    Raises:
        ValueError: malformed ``ground_truth``, ``tool_rewards`` or ``answer_scope``.
    """
    if answer_scope not in ("model", "response"):
        raise ValueError(f"answer_scope={answer_scope!r} must be 'model' or 'response' (reward_kwargs.answer_scope)")
    text = model_text(solution_str) if answer_scope == "model" else solution_str
    target = _target_answer(ground_truth).strip().lower()
    tool_rewards = _tool_rewards(extra_info)
    tool_reward = min(sum(tool_rewards), MAX_TOOL_REWARD)
    answer_reward = ANSWER_REWARD if target and target in text.lower() else 0.0
    format_reward = FORMAT_REWARD if FINAL_MARKER in text else 0.0
    return {
        "score": tool_reward + answer_reward + format_reward,
        "tool_reward": tool_reward,
        "answer_reward": answer_reward,
        "format_reward": format_reward,
        "tool_calls": float(len(tool_rewards)),
    }
