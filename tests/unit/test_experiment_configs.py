"""The Memory-RL and tool-use experiments compose, validate with verl's real schema and checks, and
carry the reference run's settings (issue 5 part 5, issue 6 part 5).

``configs/config.yaml`` composes the experiment after the ``hardware`` and ``cluster`` groups, so an
experiment's pinned settings (a shared GPU's memory fraction, GPUs per node) win over their defaults.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpokit.config.compose import compose_kit
from grpokit.config.point import PointSpec, build_point
from grpokit.paths import package_file
from grpokit.runtime.processes import sidecars
from grpokit.tasks.memalpha import server as memory_server
from grpokit.validate import validate_point

SHARED = Path(os.environ.get("GRPOKIT_SHARED", Path(__file__).resolve().parents[2].parent / "shared"))


@pytest.fixture(scope="module")
def memalpha_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real NLU data (../shared/data/nlu) as memalpha parquet, a few rows."""
    from grpokit.tasks.memalpha import data

    out = tmp_path_factory.mktemp("memalpha")
    args = argparse.Namespace(
        source=f"nlu:{SHARED / 'data' / 'nlu'}",
        out=out,
        num_train=4,
        num_test=2,
        seed=0,
        qa_per_row=4,
        chunk_chars=2000,
    )
    data.main(args)
    return out


@pytest.fixture(scope="module")
def tool_memory_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpokit.tasks.tool_memory import data

    out = tmp_path_factory.mktemp("tool_memory")
    for split, num in (("train", 8), ("test", 4)):
        data.write_parquet(data.build_rows(num, 0, split), out / f"{split}.parquet")
    return out


def point(overrides: list[str], tmp_path: Path) -> tuple[PointSpec, object]:
    cfg = compose_kit([*overrides, f"logs_root={tmp_path / 'logs'}", "sweep_name=unit"])
    return build_point(cfg, index=0, kit_overrides=overrides, swept={}), cfg


def verl_cfg(spec: PointSpec):
    cfg, problems = validate_point(spec)
    assert cfg is not None, problems
    return cfg, problems


def memalpha_overrides(model: Path, data_dir: Path) -> list[str]:
    return ["experiment=memalpha_grpo", "model=tiny", f"model.path={model}", f"experiment.data_dir={data_dir}"]


# ---- memalpha_grpo (smoke) -----------------------------------------------------------------------


def test_memalpha_smoke_has_the_reference_settings_and_sidecars(tiny_model_dir, memalpha_dir, tmp_path):
    spec, _ = point(memalpha_overrides(tiny_model_dir, memalpha_dir), tmp_path)
    cfg, _ = verl_cfg(spec)
    assert cfg.algorithm.adv_estimator == "grpo"
    assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n) == (1, 2)
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (2048, 512)
    assert (cfg.actor_rollout_ref.rollout.max_model_len, cfg.actor_rollout_ref.rollout.max_num_seqs) == (3072, 4)
    assert cfg.trainer.total_training_steps == 2
    assert cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert cfg.actor_rollout_ref.rollout.free_cache_engine is True
    assert cfg.reward.custom_reward_function.path == str(package_file("tasks/memalpha/reward.py"))
    assert cfg.reward.custom_reward_function.name == "compute_score"
    assert cfg.data.train_files == str(memalpha_dir / "train.parquet")
    assert spec.verl_value("trainer.n_gpus_per_node") == "1"

    answer, memory = spec.sidecars["answer_llm"], spec.sidecars["memory_server"]
    assert list(spec.sidecars) == ["answer_llm", "memory_server"], "answer_llm must start first"
    written = {  # the file's keys; the settings are complete with SidecarConf's defaults
        "kind": "vllm",
        "model": str(tiny_model_dir),
        "served_model_name": answer.served_model_name,
        "dtype": "float16",
        "max_model_len": 2048,
        "gpu_memory_utilization": 0.55,
        "max_num_seqs": 8,
        "enforce_eager": True,
        "gpus": 1,
        "placement": "shared",
        "start_timeout_s": 600,
    }
    assert {k: getattr(answer, k) for k in written} == written and answer.health_path == "/health"
    assert answer.served_model_name
    assert memory.kind == "memory_server" and memory.answer == "answer_llm"
    assert memory.tokenizer == str(tiny_model_dir) and memory.top_k == 20
    assert memory.reward_kwargs == {"memory_server_url": "{url}/batch_process"}


def test_memalpha_smoke_validates_on_one_gpu_as_composed(tiny_model_dir, memalpha_dir, tmp_path):
    spec, _ = point(memalpha_overrides(tiny_model_dir, memalpha_dir), tmp_path)
    cfg, problems = verl_cfg(spec)
    assert problems == []
    assert cfg.actor_rollout_ref.rollout.gpu_memory_utilization == 0.35


def test_memalpha_validates_with_the_rollout_fraction_that_fits(tiny_model_dir, memalpha_dir, tmp_path):
    overrides = [
        *memalpha_overrides(tiny_model_dir, memalpha_dir),
        "verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.35",
    ]
    spec, _ = point(overrides, tmp_path)
    _, problems = verl_cfg(spec)
    assert problems == []


def test_memalpha_on_one_gpu_with_rollout_09_is_refused_with_the_numbers(tiny_model_dir, memalpha_dir, tmp_path):
    overrides = [
        *memalpha_overrides(tiny_model_dir, memalpha_dir),
        "verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.9",
    ]
    spec, _ = point(overrides, tmp_path)
    _, problems = verl_cfg(spec)
    assert len(problems) == 1, problems
    text = str(problems[0])
    assert problems[0].key == "verl.actor_rollout_ref.rollout.gpu_memory_utilization"
    assert "1.45" in text and "rollout 0.9 + answer_llm 0.55" in text and "0.95" in text
    assert "gpu_memory_utilization<=0.4" in text


def test_memalpha_sidecar_commands_match_the_servers_command_lines(tiny_model_dir, memalpha_dir, tmp_path):
    spec, _ = point(memalpha_overrides(tiny_model_dir, memalpha_dir), tmp_path)
    planned = {
        name: sidecars.Sidecar(name=name, spec=s, host="127.0.0.1", port=port, key="k", log_path=tmp_path / name)
        for (name, s), port in zip(spec.sidecars.items(), (18183, 5005), strict=True)
    }
    vllm = sidecars.build_command(planned["answer_llm"], planned)
    assert vllm[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"] and vllm[4] == str(tiny_model_dir)
    flags = dict(zip(vllm[5::2], vllm[6::2], strict=False))
    assert flags["--served-model-name"] == spec.sidecars["answer_llm"].served_model_name
    assert (flags["--dtype"], flags["--max-model-len"], flags["--gpu-memory-utilization"]) == (
        "float16",
        "2048",
        "0.55",
    )
    assert flags["--max-num-seqs"] == "8" and flags["--port"] == "18183"
    assert vllm[-1] == "--enforce-eager"

    cmd = sidecars.build_command(planned["memory_server"], planned)
    assert cmd[1:3] == ["-m", "grpokit.tasks.memalpha.server"]
    args = memory_server.build_arg_parser().parse_args(cmd[3:])  # the server's real CLI accepts it
    assert args.answer_base_url == "http://127.0.0.1:18183/v1"
    assert args.answer_model == spec.sidecars["answer_llm"].served_model_name
    assert (args.tokenizer, args.top_k, args.port) == (str(tiny_model_dir), 20, 5005)
    url = planned["memory_server"].url
    assert spec.sidecars["memory_server"].reward_kwargs["memory_server_url"].format(url=url) == (
        "http://127.0.0.1:5005/batch_process"
    )


# ---- memalpha_grpo_full ---------------------------------------------------------------------------


def test_memalpha_full_validates_on_two_gpus_with_a_dedicated_answer_gpu(tiny_model_dir, memalpha_dir, tmp_path):
    overrides = [
        "experiment=memalpha_grpo_full",
        "model=tiny",
        f"model.path={tiny_model_dir}",
        f"experiment.data_dir={memalpha_dir}",
        "cluster.gpus_per_node=2",
    ]
    spec, _ = point(overrides, tmp_path)
    cfg, problems = verl_cfg(spec)
    assert problems == []
    assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n) == (32, 8)
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (4096, 2048)
    assert cfg.actor_rollout_ref.rollout.max_num_seqs == 256
    assert cfg.actor_rollout_ref.rollout.max_model_len >= 4096 + 2048
    assert cfg.actor_rollout_ref.actor.kl_loss_coef == 0.001
    assert spec.sidecars["answer_llm"].placement == "dedicated"
    assert spec.verl_value("trainer.n_gpus_per_node") == "1", "the answer LLM's GPU is not the trainer's"
    assert spec.sidecars["memory_server"].reward_kwargs == {"memory_server_url": "{url}/batch_process"}


def test_memalpha_full_asks_for_two_gpus_itself(tiny_model_dir, memalpha_dir, tmp_path):
    spec, _ = point(
        [
            "experiment=memalpha_grpo_full",
            "model=tiny",
            f"model.path={tiny_model_dir}",
            f"experiment.data_dir={memalpha_dir}",
            "cluster=slurm",
        ],
        tmp_path,
    )
    assert spec.cluster.gpus_per_node == 2
    assert verl_cfg(spec)[1] == []


# ---- tool_memory_grpo -------------------------------------------------------------------------------

TOOL_REFERENCE = {
    "algorithm.adv_estimator": "grpo",
    "data.train_batch_size": 4,
    "data.max_prompt_length": 1024,
    "data.max_response_length": 512,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.mode": "async",
    "actor_rollout_ref.rollout.n": 2,
    "actor_rollout_ref.rollout.multi_turn.enable": True,
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": str(package_file("tasks/tool_memory/tool_config.yaml")),
    "actor_rollout_ref.rollout.multi_turn.format": "qwen3_coder",
    "actor_rollout_ref.rollout.multi_turn.max_user_turns": 2,
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 3,
    "actor_rollout_ref.rollout.agent.default_agent_loop": "tool_agent",
    "reward.custom_reward_function.path": str(package_file("tasks/tool_memory/reward.py")),
    "reward.custom_reward_function.name": "compute_score",
    "trainer.total_training_steps": 2,
}


def tool_overrides(model: Path, data_dir: Path) -> list[str]:
    return ["experiment=tool_memory_grpo", "model=tiny", f"model.path={model}", f"experiment.data_dir={data_dir}"]


def test_tool_memory_validates_with_the_reference_overrides_on_two_gpus(tiny_model_dir, tool_memory_dir, tmp_path):
    spec, _ = point([*tool_overrides(tiny_model_dir, tool_memory_dir), "cluster.gpus_per_node=2"], tmp_path)
    cfg, problems = verl_cfg(spec)
    assert problems == []
    assert {k: OmegaConf.select(cfg, k) for k in TOOL_REFERENCE} == TOOL_REFERENCE
    assert spec.verl_value("trainer.n_gpus_per_node") == "2" and spec.verl_value("trainer.nnodes") == "1"
    # derived from the sizes: batch x n sequence slots, prompt + response + margin context
    assert cfg.actor_rollout_ref.rollout.max_num_seqs == 8
    assert cfg.actor_rollout_ref.rollout.max_model_len == 1024 + 512 + 256
    assert spec.sidecars == {}


def test_tool_memory_sizes_set_by_the_user_flow_into_the_derived_settings(tiny_model_dir, tool_memory_dir, tmp_path):
    overrides = [
        *tool_overrides(tiny_model_dir, tool_memory_dir),
        "cluster.gpus_per_node=2",
        "verl.data.train_batch_size=8",
        "verl.actor_rollout_ref.rollout.n=4",
        "verl.data.max_response_length=1024",
        # the fixture's tool data holds 8 prompts: one step of batch 8 (two would run out of data,
        # which validate.data_steps refuses)
        "verl.trainer.total_training_steps=1",
    ]
    spec, _ = point(overrides, tmp_path)
    cfg, problems = verl_cfg(spec)
    assert problems == []
    assert cfg.actor_rollout_ref.rollout.max_num_seqs == 32
    assert cfg.actor_rollout_ref.rollout.max_model_len == 1024 + 1024 + 256
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 8


def test_tool_memory_with_a_model_length_below_prompt_plus_response_is_refused(
    tiny_model_dir, tool_memory_dir, tmp_path
):
    overrides = [
        *tool_overrides(tiny_model_dir, tool_memory_dir),
        "cluster.gpus_per_node=2",
        "verl.actor_rollout_ref.rollout.max_model_len=1200",
    ]
    spec, _ = point(overrides, tmp_path)
    _, problems = verl_cfg(spec)
    assert [p.key for p in problems] == ["verl.actor_rollout_ref.rollout.max_model_len"], problems


def test_tool_memory_asks_for_two_gpus_itself(tiny_model_dir, tool_memory_dir, tmp_path):
    spec, _ = point([*tool_overrides(tiny_model_dir, tool_memory_dir), "cluster=slurm"], tmp_path)
    assert spec.cluster.gpus_per_node == 2
    assert spec.verl_value("trainer.n_gpus_per_node") == "2"
