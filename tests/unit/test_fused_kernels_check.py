"""verl's fused logits with padding kept are refused before submission (grpokit.validate.kit_checks.
check_fused_kernels): measured on Qwen3.5 on one H200, verl 0.9.1 crashed in the first
compute_log_prob after ~8 minutes of start-up (docs/performance.md)."""

from __future__ import annotations

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.validate import validate_point

FUSED = "verl.actor_rollout_ref.model.use_fused_kernels"
NO_PADDING_REMOVAL = "verl.actor_rollout_ref.model.use_remove_padding"


def problems_on_fused(overrides: list[str]):
    spec = build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})
    _, problems = validate_point(spec)
    return [p for p in problems if p.key == FUSED]


def test_the_h200_profile_with_fused_kernels_on_is_refused_naming_the_key_and_the_fix(base):
    # hardware=h200 keeps padding (use_remove_padding=false): the measured crash, fused kernels on
    (problem,) = problems_on_fused([*base, "hardware=h200", f"{FUSED}=true"])
    assert problem.point.startswith("000") and "\n" not in problem.message
    assert "use_remove_padding=false" in problem.message and "verl 0.9.1" in problem.message
    assert f"{FUSED}=false" in problem.fix and f"{NO_PADDING_REMOVAL}=true" in problem.fix


@pytest.mark.parametrize(
    "extra",
    [
        ["hardware=h200"],  # the bundled profiles as written
        ["hardware=consumer_24gb"],
        [f"{FUSED}=true", f"{NO_PADDING_REMOVAL}=true"],  # fused logits on unpadded sequences: fine
        [f"{FUSED}=false", f"{NO_PADDING_REMOVAL}=false"],
    ],
)
def test_the_bundled_hardware_profiles_and_the_working_pairs_pass(base, extra):
    assert problems_on_fused([*base, *extra]) == []
