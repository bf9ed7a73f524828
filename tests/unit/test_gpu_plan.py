"""The job's GPU plan: placement of the trainer and the sidecars, and refusal of over-subscribed GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpokit.config.point import PointSpec
from grpokit.validate import gpu_plan


@pytest.fixture
def spec(bare_point):
    """``spec(gpus, sidecars)``: a point of ``gpus`` GPUs per node with these sidecars."""

    def make(gpus: int, sidecars: dict) -> PointSpec:
        return bare_point(Path("/tmp/x"), 0, {"gpus_per_node": gpus}, sidecars=sidecars)

    return make


def cfg(fraction: float):
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"gpu_memory_utilization": fraction}}})


def test_dedicated_sidecars_take_the_last_gpus_and_the_trainer_the_rest(spec):
    p = gpu_plan.plan(
        spec(
            4,
            {
                "answer": {"gpus": 1, "placement": "dedicated", "gpu_memory_utilization": 0.8},
                "memory": {"kind": "memory_server"},
            },
        ),
        0.5,
    )
    assert p["trainer"] == {"gpus": [0, 1, 2], "rollout_gpu_memory_utilization": 0.5}
    assert p["sidecars"] == {"answer": {"gpus": [3], "placement": "dedicated", "gpu_memory_utilization": 0.8}}
    assert p["gpu0_vllm_fraction_sum"] == 0.5  # a dedicated sidecar leaves GPU 0 alone


def test_two_dedicated_sidecars_do_not_overlap(spec):
    p = gpu_plan.plan(
        spec(4, {"a": {"gpus": 2, "placement": "dedicated"}, "b": {"gpus": 1, "placement": "dedicated"}}), 0.5
    )
    assert p["sidecars"]["a"]["gpus"] == [2, 3] and p["sidecars"]["b"]["gpus"] == [1]
    assert p["trainer"]["gpus"] == [0]


def test_a_shared_sidecar_sits_on_gpu0_and_its_fraction_counts(spec):
    p = gpu_plan.plan(spec(1, {"answer": {"gpus": 1, "placement": "shared", "gpu_memory_utilization": 0.3}}), 0.5)
    assert p["sidecars"]["answer"]["gpus"] == [0] and p["trainer"]["gpus"] == [0]
    assert p["gpu0_vllm_fraction_sum"] == pytest.approx(0.8)
    assert (
        gpu_plan.check(spec(1, {"answer": {"gpus": 1, "placement": "shared", "gpu_memory_utilization": 0.3}}), cfg(0.5))
        == []
    )


def test_an_over_subscribed_shared_gpu_is_refused_with_the_numbers_and_a_fix(spec):
    s = spec(1, {"answer": {"gpus": 1, "placement": "shared", "gpu_memory_utilization": 0.5}})
    (problem,) = gpu_plan.check(s, cfg(0.6))
    assert problem.key == "verl.actor_rollout_ref.rollout.gpu_memory_utilization"
    assert "sum to 1.1" in problem.message and "rollout 0.6" in problem.message and "answer 0.5" in problem.message
    assert "gpu_memory_utilization<=0.45" in problem.fix


def test_dedicated_sidecars_that_leave_the_trainer_no_gpu_are_refused(spec):
    (problem,) = gpu_plan.check(spec(1, {"answer": {"gpus": 1, "placement": "dedicated"}}), cfg(0.5))
    assert problem.key == "cluster.gpus_per_node" and "leave none to the trainer" in problem.message


def test_the_limit_itself_is_allowed(spec):
    s = spec(1, {"answer": {"gpus": 1, "placement": "shared", "gpu_memory_utilization": 0.45}})
    assert gpu_plan.check(s, cfg(0.5)) == []
    assert gpu_plan.check(s, cfg(0.51))
