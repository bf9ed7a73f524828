"""verl's published launch scripts through the kit, judged against the installed verl itself (issue 23).

Each script's override list (``tests/data/verl_example_overrides.txt``: the scripts, their commit, and
the kit's documented adjustments) is checked twice: by the kit as a user types it (``verl.`` in front,
the command-line check, the point, every validation) and by verl alone (its composition of
``ppo_trainer`` with the same overrides, then ``validate_config``). The kit must accept what verl
accepts (no false refusal) and refuse what verl refuses. Then single-key mutations of an accepted
script: what the kit says, what verl's ``validate_config`` says, and what verl does on the GPU.

verl is imported once per session (its composition is the kit's own cached template,
:func:`grpokit.config.verl_schema.apply_overrides`).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.config.verl_schema import apply_overrides, lean_imports
from grpokit.problems import Problem
from grpokit.validate import SweepValidationError, validate_point
from grpokit.validate.command_line import check
from grpokit.validate.verl_check import _without_vllm_checks

CORPUS = Path(__file__).resolve().parents[1] / "data" / "verl_example_overrides.txt"
#: Overrides the kit's adjustments drop (the corpus file's header says why).
DROPPED = ("data.train_files", "data.val_files", "actor_rollout_ref.rollout.multi_turn.tool_config_path")
#: Paths replaced by the tiny model.
MODEL_KEYS = ("actor_rollout_ref.model.path", "critic.model.path")
#: The experiment's step count and data caps give way to the script's epochs.
EPOCHS = ["verl.trainer.total_training_steps=null", "verl.data.train_max_samples=-1", "verl.data.val_max_samples=-1"]


def corpus() -> dict[str, tuple[str, list[str]]]:
    """``{script: (commit, overrides)}`` from the corpus file (a ``config:`` line is an override too)."""
    out: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in CORPUS.read_text().splitlines():
        if line.startswith("## "):
            name, _, commit = line[3:].partition(" @ ")
            out[name] = (commit.strip(), [])
        elif line and not line.startswith("#") and name:
            out[name][1].append(line.removeprefix("config:"))
    return out


def adjusted(overrides: list[str], model: Path, adapter: Path) -> list[str]:
    """The script's overrides after the kit's documented adjustments (verl's own key names)."""
    out = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key in DROPPED:
            continue
        if key in MODEL_KEYS:
            value = str(model)
        out.append(f"{key}={value.replace('{adapter}', str(adapter))}")
    return out


def shape(overrides: list[str]) -> list[str]:
    """The kit's job shape matching the script's ``trainer.n_gpus_per_node`` / ``trainer.nnodes``."""
    typed = dict(o.partition("=")[::2] for o in overrides)
    return [
        f"cluster.gpus_per_node={typed.get('trainer.n_gpus_per_node', 8)}",
        f"cluster.nodes={typed.get('trainer.nnodes', 1)}",
    ]


def verl_verdict(overrides: list[str], data: Path) -> str | None:
    """verl alone: its composition with ``overrides`` and the data files, then ``validate_config``.

    Returns None when verl accepts, else its message's first line. verl's LoRA-rank check needs
    vLLM, which is not installed here: it is left out on both sides (the kit defers it to the job).
    """
    lean_imports()
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    files = [f"data.train_files={data}/train.parquet", f"data.val_files={data}/test.parquet"]
    try:
        cfg = apply_overrides([*overrides, *files])
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(
                config=_without_vllm_checks(cfg),
                use_reference_policy=need_reference_policy(cfg),
                use_critic=need_critic(cfg),
            )
    except Exception as exc:  # verl's refusal, whatever its type
        cause = exc.__cause__ or exc
        return (str(cause).splitlines() or [type(cause).__name__])[0]
    return None


def kit_verdict(argv: list[str]) -> list[Problem]:
    """The kit on a command line: the command-line check, the point, every validation of the point."""
    argv, problems = check(argv)
    if problems:
        return problems
    try:
        spec = build_point(compose_kit(argv), index=0, kit_overrides=argv, swept={})
    except SweepValidationError as err:
        return err.problems
    return validate_point(spec)[1]


@pytest.fixture(autouse=True)
def own_notes(monkeypatch):
    """Notes said here (once per process) are not taken from later tests that expect to see them.

    The scripts log to W&B online (``trainer.logger=['console','wandb']``): a user who runs them has
    a W&B key (``wandb login``), which the kit checks before submission (grpokit.validate.job_needs);
    the key is set here as that user's environment has it.
    """
    from grpokit import problems

    monkeypatch.setattr(problems, "_SAID", set())
    monkeypatch.setenv("WANDB_API_KEY", "a-users-key")


@pytest.fixture(scope="module")
def setting(tiny_model_dir, gsm8k_dir, tmp_path_factory):
    """(tiny model, prepared GSM8K, an adapter folder, the kit's overrides every script gets)."""
    tmp = tmp_path_factory.mktemp("corpus")
    adapter = tmp / "adapter"
    adapter.mkdir()
    kit = [
        "model=tiny",
        f"model.path={tiny_model_dir}",
        f"experiment.data_dir={gsm8k_dir}",
        f"logs_root={tmp / 'logs'}",
        "sweep_name=corpus",
        *EPOCHS,
    ]
    return tiny_model_dir, gsm8k_dir, adapter, kit


def judge(setting, script: str, mutation: list[str] = ()) -> tuple[list[Problem], str | None]:
    """(the kit's problems, verl's refusal or None) for ``script`` with ``mutation`` (verl keys) applied."""
    model, data, adapter, kit = setting
    _, overrides = corpus()[script]
    typed = adjusted(overrides, model, adapter)
    changed = {m.partition("=")[0] for m in mutation}
    typed = [o for o in typed if o.partition("=")[0] not in changed] + list(mutation)
    argv = [*kit, *shape(typed), *(f"verl.{o}" for o in typed)]
    return kit_verdict(argv), verl_verdict(typed, data)


GRPO = "examples/grpo_trainer/run_qwen3_8b_fsdp.sh"
MULTITURN = "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_vllm_fsdp.sh"


@pytest.mark.parametrize("script", list(corpus()))
def test_the_kit_accepts_what_verl_accepts_and_refuses_what_verl_refuses(setting, script):
    problems, verl_says = judge(setting, script)
    if verl_says is None:
        assert problems == [], f"{script}: verl accepts it, the kit refused: {[str(p) for p in problems]}"
    else:
        assert problems, f"{script}: verl refuses it ({verl_says}), the kit accepted it"


def test_the_corpus_file_names_its_source_commits():
    scripts = corpus()
    assert len(scripts) >= 8 and all(len(commit) == 40 for commit, _ in scripts.values())
    assert {s.split("/")[1] for s in scripts} >= {"grpo_trainer", "ppo_trainer", "tuning", "sglang_multiturn"}


#: (mutation of an accepted script, the script, the key the kit names or None for accepted, what verl
#: does on the GPU with it: verl 0.9.1 / vLLM source). The four floats are one case (each was refused
#: before as "not an integer": verl's YAML writes their defaults as integers).
MUTATIONS = [
    (
        [
            "actor_rollout_ref.actor.entropy_coeff=0.001",
            "actor_rollout_ref.rollout.top_p=0.9",
            "actor_rollout_ref.rollout.val_kwargs.temperature=0.6",
            "actor_rollout_ref.rollout.over_sample_rate=0.1",
        ],
        GRPO,
        None,
        "trains (ActorConfig.entropy_coeff, RolloutConfig.top_p / over_sample_rate, SamplingConfig.temperature: float)",
    ),
    (["actor_rollout_ref.actor.ppo_micro_batch_size=8"], GRPO, None, "trains (global micro batch, split per GPU)"),
    (["actor_rollout_ref.ref.log_prob_micro_batch_size=8"], GRPO, None, "trains (global micro batch, split per GPU)"),
    (
        ["actor_rollout_ref.rollout.tensor_model_parallel_size=3"],
        GRPO,
        "verl.actor_rollout_ref.rollout.tensor_model_parallel_size",
        "worker start: rollout world_size: 8 is not divisible by infer_world_size: 3",
    ),
    (
        ["actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=3"],
        GRPO,
        "verl.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
        "worker start: FSDP device mesh (8 // 3, 3) cannot be built",
    ),
    (
        ["actor_rollout_ref.model.lora_adapter_path=/nonexistent/adapter"],
        GRPO,
        "verl.actor_rollout_ref.model.lora_adapter_path",
        "worker start: the adapter's files are not found",
    ),
    (
        ["algorithm.adv_estimator=gpro"],
        GRPO,
        "verl.algorithm.adv_estimator",
        "step 1: ValueError Unknown advantage estimator simply: gpro",
    ),
    (
        ["actor_rollout_ref.actor.policy_loss.loss_mode=gpso"],
        GRPO,
        "verl.actor_rollout_ref.actor.policy_loss.loss_mode",
        "first update: Unsupported loss mode: gpso",
    ),
    (
        ["actor_rollout_ref.rollout.gpu_memory_utilization=1.5"],
        GRPO,
        "verl.actor_rollout_ref.rollout.gpu_memory_utilization",
        "engine start: vLLM CacheConfig refuses gpu_memory_utilization > 1",
    ),
    (
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"],
        MULTITURN,
        "verl.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "first update: prepare_micro_batches asserts (mini batch per GPU 32x8/16 = 16)",
    ),
    (["data.train_batch_size=null"], GRPO, "verl.data.train_batch_size", "verl's dataloader gets batch_size=None"),
    (
        ["trainer.default_local_dir=/etc/hostname/ckpt"],
        GRPO,
        "verl.trainer.default_local_dir",
        "first save: the checkpoint folder cannot be created",
    ),
    (
        ["actor_rollout_ref.actor.entropy_coeff=abc"],
        GRPO,
        "verl.actor_rollout_ref.actor.entropy_coeff",
        "first update: text x tensor",
    ),
    (
        ["reward_model.reward_manager=dapo"],
        GRPO,
        "verl.reward_model.reward_manager",
        "trains with the default reward manager: main_ppo never reads reward_model.* (issue 34)",
    ),
    (
        ["reward_model.enable=True"],
        GRPO,
        "verl.reward_model.enable",
        "trains without the reward model: main_ppo never reads reward_model.* (issue 34)",
    ),
    (
        ["custom_reward_function.path=/nonexistent/reward.py"],
        GRPO,
        "verl.custom_reward_function.path",
        "trains with verl's default scoring: main_ppo reads reward.custom_reward_function (issue 34)",
    ),
    (
        ["reward.reward_manager.name=dapo"],
        GRPO,
        None,
        "trains with verl's DAPO reward manager (the key main_ppo reads)",
    ),
]


@pytest.mark.parametrize(("mutation", "script", "key", "on_gpu"), MUTATIONS, ids=[m[0][0] for m in MUTATIONS])
def test_a_single_key_mutation_is_judged_on_the_key_typed(setting, mutation, script, key, on_gpu):
    problems, verl_says = judge(setting, script, mutation)
    if key is None:
        assert problems == [] and verl_says is None, [str(p) for p in problems]
    else:
        assert key in {p.key for p in problems}, [str(p) for p in problems]
        assert all(p.fix for p in problems)
