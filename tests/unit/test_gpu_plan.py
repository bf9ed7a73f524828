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


def megatron(world: int, nnodes: int = 1, critic: bool = False, **sizes) -> object:
    """verl's composed ppo_megatron_trainer config with ``sizes`` set on the actor (``tp``, ``pp``, ...)."""
    from grpokit.config.verl_schema import MEGATRON_CONFIG_NAME, VerlConfigRef, apply_overrides, use

    names = {
        "tp": "tensor_model_parallel_size",
        "pp": "pipeline_model_parallel_size",
        "cp": "context_parallel_size",
        "ep": "expert_model_parallel_size",
        "etp": "expert_tensor_parallel_size",
        "vpp": "virtual_pipeline_model_parallel_size",
    }
    use(VerlConfigRef(MEGATRON_CONFIG_NAME))
    try:
        overrides = [f"actor_rollout_ref.actor.megatron.{names[k]}={v}" for k, v in sizes.items()]
        overrides += [f"trainer.n_gpus_per_node={world // nnodes}", f"trainer.nnodes={nnodes}"]
        overrides += ["algorithm.adv_estimator=gae"] if critic else []
        return apply_overrides(overrides)
    finally:
        use(None)


def test_megatron_sizes_that_fit_the_gpus_pass():
    assert gpu_plan.megatron_sizes("p", megatron(8, tp=2, pp=2, cp=2), 8) == []
    assert gpu_plan.megatron_sizes("p", megatron(16, nnodes=2, tp=4, pp=2, ep=2), 16) == []
    assert gpu_plan.megatron_sizes("p", megatron(8, tp=2, pp=2, vpp=2), 8) == []
    # the ref repeats the actor's sizes (verl's ${oc.select:...}); an FSDP config has none to check
    fsdp = OmegaConf.create({"actor_rollout_ref": {"actor": {"strategy": "fsdp"}}})
    assert gpu_plan.megatron_sizes("p", fsdp, 3) == []


def test_tp_pp_cp_that_do_not_divide_the_world_size_are_refused():
    problems = gpu_plan.megatron_sizes("p", megatron(6, tp=4), 6)
    assert [p.key for p in problems] == [
        "verl.actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
        "verl.actor_rollout_ref.ref.megatron.tensor_model_parallel_size",
    ]
    assert problems[0].message == (
        "Megatron's tp 4 x pp 1 x cp 1 = 4 does not divide the point's 6 GPU(s) "
        "(Megatron-Core: world_size (6) is not divisible by 4)"
    )
    assert problems[0].fix == (
        "set verl.actor_rollout_ref.actor.megatron.tensor_model_parallel_size / pipeline_model_parallel_size / "
        "context_parallel_size so that their product divides 6 (one of 1, 2, 3, 6), or ask for a multiple of 4 GPUs "
        "(cluster.gpus_per_node x cluster.nodes)"
    )


def test_expert_parallelism_outside_data_parallelism_is_refused():
    (actor, _ref) = gpu_plan.megatron_sizes("p", megatron(8, tp=2, ep=8), 8)
    assert actor.key == "verl.actor_rollout_ref.actor.megatron.expert_model_parallel_size"
    assert actor.message == (
        "Megatron's expert tp 2 x ep 8 x pp 1 = 16 does not divide the point's 8 GPU(s): expert parallelism must "
        "fit in data parallelism (dp 4 x cp 1) (Megatron-Core: world_size (8) is not divisible by "
        "expert_tensor_model_pipeline_parallel size (16))"
    )
    assert actor.fix == (
        "set verl.actor_rollout_ref.actor.megatron.expert_model_parallel_size to a divisor of 4 (one of 1, 2, 4)"
    )
    assert gpu_plan.megatron_sizes("p", megatron(8, tp=2, ep=8, etp=1), 8) == []  # expert TP 1: 1 x 8 x 1


def test_a_virtual_pipeline_without_a_pipeline_is_refused():
    problems = gpu_plan.megatron_sizes("p", megatron(4, vpp=2), 4)
    assert problems[0].key == "verl.actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size"
    assert problems[0].message == (
        "virtual pipeline size 2 with pipeline_model_parallel_size 1 (Megatron-Core: pipeline-model-parallel size "
        "should be greater than 1 with interleaved schedule)"
    )


def test_the_gpu_plan_check_counts_the_trainers_gpus(spec):
    cfg = megatron(4, tp=4)
    cfg.actor_rollout_ref.rollout.gpu_memory_utilization = 0.5
    assert gpu_plan.check(spec(4, {}), cfg) == []
    cfg.trainer.n_gpus_per_node = 3
    assert [p.key for p in gpu_plan.check(spec(3, {}), cfg)][0] == (
        "verl.actor_rollout_ref.actor.megatron.tensor_model_parallel_size"
    )
