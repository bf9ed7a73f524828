"""tool_memory reward: tool + answer + format parts, and how verl loads and calls it."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn

from grpokit.tasks.tool_memory.reward import MAX_SCORE, compute_score, model_text

pytestmark = pytest.mark.timeout(60)

GROUND_TRUTH = {"target_answer": "Chamomile", "target_id": "mem_tea"}
TOOL_TURN = (
    "<tool_call>\n<function=read_memory>\n<parameter=memory_id>\nmem_tea\n</parameter>\n</function>\n</tool_call>"
    "user\n<tool_response>\nThe user prefers chamomile tea for late afternoon breaks.\n</tool_response>\nassistant\n"
)


def _score(solution: str, tool_rewards=None, **kwargs) -> dict[str, float]:
    extra_info = None if tool_rewards is None else {"tool_rewards": tool_rewards}
    return compute_score("grpokit/tool_memory", solution, GROUND_TRUTH, extra_info, **kwargs)


def test_full_rollout_scores_max() -> None:
    result = _score(TOOL_TURN + "FINAL: chamomile", [0.25, 0.75])
    assert result == {"score": 2.25, "tool_reward": 1.0, "answer_reward": 1.0, "format_reward": 0.25, "tool_calls": 2.0}
    assert MAX_SCORE == 2.25


@pytest.mark.parametrize(
    ("solution", "tool_rewards", "expected"),
    [
        ("FINAL: chamomile", None, (0.0, 1.0, 0.25)),  # no extra_info at all
        ("FINAL: chamomile", [], (0.0, 1.0, 0.25)),
        ("FINAL: CHAMOMILE tea", [0.25], (0.25, 1.0, 0.25)),  # case-insensitive answer
        ("chamomile", [0.75], (0.75, 1.0, 0.0)),  # no FINAL:
        ("final: chamomile", [0.75], (0.75, 1.0, 0.0)),  # the marker is case-sensitive
        ("FINAL: oolong", [0.25, 0.75, 0.75], (1.0, 0.0, 0.25)),  # tool reward capped at 1.0
        ("FINAL: oolong", np.array([0.25, 0.25]), (0.5, 0.0, 0.25)),  # a numpy array, as in a batch
    ],
)
def test_parts(solution: str, tool_rewards, expected: tuple[float, float, float]) -> None:
    result = _score(solution, tool_rewards)
    assert (result["tool_reward"], result["answer_reward"], result["format_reward"]) == expected
    assert result["score"] == pytest.approx(sum(expected))
    assert result["tool_calls"] == (0 if tool_rewards is None else len(tool_rewards))  # a count, not scored


def test_answer_inside_a_tool_response_is_not_the_models_answer() -> None:
    solution = TOOL_TURN + "FINAL: I do not know"
    assert _score(solution, [0.25, 0.75])["answer_reward"] == 0.0
    # The reference's literal rule matches anywhere in the response, tool output included.
    assert _score(solution, [0.25, 0.75], answer_scope="response")["answer_reward"] == 1.0


def test_model_text_drops_complete_and_truncated_tool_responses() -> None:
    text = "a<tool_response>\nx\n</tool_response>b<tool_response>\ncut off"
    assert model_text(text) == "ab"


def test_bare_string_ground_truth_is_the_answer() -> None:
    result = compute_score("grpokit/tool_memory", "FINAL: chamomile", "chamomile", {"tool_rewards": [0.25]})
    assert result["score"] == 1.5


def test_malformed_inputs_name_the_key() -> None:
    with pytest.raises(ValueError, match="target_answer"):
        compute_score("s", "FINAL: x", {"target_id": "mem_tea"})
    with pytest.raises(ValueError, match="tool_rewards"):
        compute_score("s", "FINAL: x", GROUND_TRUTH, {"tool_rewards": 0.5})
    with pytest.raises(ValueError, match="answer_scope"):
        compute_score("s", "FINAL: x", GROUND_TRUTH, answer_scope="all")


def test_verl_loads_it_by_package_path_with_reward_kwargs() -> None:
    """The overrides the experiment uses: reward.custom_reward_function.{path,name,reward_kwargs}."""
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://grpokit.tasks.tool_memory.reward",
                    "name": "compute_score",
                    "reward_kwargs": {"answer_scope": "response"},
                }
            }
        }
    )
    reward_fn = get_custom_reward_fn(config)
    # How the naive reward-loop manager calls it (keyword arguments only).
    result = reward_fn(
        data_source="grpokit/tool_memory",
        solution_str=TOOL_TURN + "FINAL: ?",
        ground_truth=GROUND_TRUTH,
        extra_info={"tool_rewards": [0.25, 0.75], "num_turns": 6},
    )
    assert result == {"score": 2.25, "tool_reward": 1.0, "answer_reward": 1.0, "format_reward": 0.25, "tool_calls": 2.0}
