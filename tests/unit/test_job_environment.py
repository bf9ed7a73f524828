"""The job's environment, asked before submission (grpokit.validate.job_environment, job_needs).

The job's Python here is a real second virtual environment (``python -m venv --without-pip``: the
interpreter alone, as a training environment that lacks the logger's package would be); its answer
is kept on disk until its ``site-packages`` changes. The engine checks read a recorded answer of
an environment that trains (a :class:`JobEnvironment` holding vLLM), which this CPU machine has not.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.validate import job_environment, job_needs, validate_point
from grpokit.validate.job_environment import JobEnvironment


def point(overrides: list[str]):
    return build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE_DIR", str(tmp_path / "cache"))
    job_environment.ask.cache_clear()
    yield tmp_path / "cache"
    job_environment.ask.cache_clear()


@pytest.fixture
def bare_venv(tmp_path) -> Path:
    """A real second environment: an interpreter with no packages of its own."""
    venv = tmp_path / "job venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv


def site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python3*/site-packages")
    return found


def test_a_logger_the_jobs_python_lacks_is_refused_naming_the_package(base, bare_venv, cache):
    python = str(bare_venv / "bin" / "python")
    spec = point([*base, "cluster=slurm", f"cluster.python={python}", "verl.trainer.logger=[console,swanlab]"])
    _, problems = validate_point(spec)
    assert [(p.key, p.message, p.fix) for p in problems] == [
        (
            "verl.trainer.logger",
            f"logger swanlab needs the package swanlab, which the job's Python ({python}) does not have",
            "pip install swanlab in the job's environment, or drop swanlab from verl.trainer.logger",
        )
    ]
    # the kit's own environment has tensorboard: the same logger list with it passes there
    _, problems = validate_point(point([*base, "verl.trainer.logger=[console,tensorboard]"]))
    assert problems == []


def test_the_answer_is_kept_until_the_environment_changes(bare_venv, cache, capsys):
    python = str(bare_venv / "bin" / "python")
    t0 = time.perf_counter()
    first = job_environment.ask(python)
    t1 = time.perf_counter()
    job_environment.ask.cache_clear()  # a new command: only the file on disk is left
    kept = job_environment.ask(python)
    t2 = time.perf_counter()
    with capsys.disabled():
        print(f"\n[job environment] first ask {t1 - t0:.3f} s, kept answer {(t2 - t1) * 1000:.1f} ms")
    assert first.error is None and first.version == kept.version and first.version_of("swanlab") is None
    assert list(cache.glob("job-env-*.json")), "nothing kept"
    # a package installed into the job's environment changes its site-packages: asked again
    info = site_packages(bare_venv) / "swanlab-0.6.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: swanlab\nVersion: 0.6.0\n")
    job_environment.ask.cache_clear()
    assert job_environment.ask(python).version_of("swanlab") == "0.6.0"


def test_an_interpreter_that_cannot_be_asked_here_refuses_nothing(base, tmp_path, cache):
    missing = str(tmp_path / "container-only" / "python")
    env = job_environment.ask(missing)
    assert env.error and "No such file" in env.error
    spec = point([*base, "cluster=slurm", f"cluster.python={missing}", "verl.trainer.logger=[console,swanlab]"])
    cfg, problems = validate_point(spec)
    assert problems == []


def test_a_misspelt_logger_is_refused_with_verls_own_list(base, cache):
    _, problems = validate_point(point([*base, "verl.trainer.logger=[console,wandbb]"]))
    (problem,) = problems
    assert problem.key == "verl.trainer.logger"
    assert problem.message.startswith("'wandbb' is not a logger backend verl supports (verl/utils/tracking.py: wandb,")
    assert job_needs.verl_logger_backends()[:2] == ("wandb", "mlflow")  # read from the installed verl's source


def test_wandb_online_without_a_key_is_refused_offline_or_with_a_key_passes(base, tmp_path, cache):
    spec = point([*base, "verl.trainer.logger=[console,wandb]"])
    cfg, _ = validate_point(spec)
    home = tmp_path / "home"
    home.mkdir()
    no_key = {"HOME": str(home)}
    (problem,) = job_needs.check(spec, cfg, job_environment.ask(sys.executable), no_key)
    assert problem.key == "runtime.wandb_mode" and "no W&B key is set here" in problem.message
    assert "runtime.wandb_mode=offline" in problem.fix and "WANDB_API_KEY" in problem.fix
    offline = point([*base, "verl.trainer.logger=[console,wandb]", "runtime.wandb_mode=offline"])
    assert job_needs.check(offline, cfg, job_environment.ask(sys.executable), no_key) == []
    assert job_needs.check(spec, cfg, job_environment.ask(sys.executable), {**no_key, "WANDB_MODE": "offline"}) == []
    assert job_needs.check(spec, cfg, job_environment.ask(sys.executable), {**no_key, "WANDB_API_KEY": "k"}) == []
    (home / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    assert job_needs.check(spec, cfg, job_environment.ask(sys.executable), no_key) == []


def test_an_engine_the_training_environment_lacks_is_refused(base, cache):
    packages = {"vllm": "0.24.0", "verl": "0.9.1", "tensorboard": "2.21.0"}
    trains = JobEnvironment("/gpu/venv/bin/python", "3.12.3", packages)
    spec = point([*base, "verl.actor_rollout_ref.rollout.name=sglang"])
    cfg, _ = validate_point(point(base))
    cfg.actor_rollout_ref.rollout.name = "sglang"
    (problem,) = job_needs.check(spec, cfg, trains, {})
    assert problem.key == "verl.actor_rollout_ref.rollout.name"
    assert problem.message == (
        "rollout engine sglang needs sglang, which the job's Python (/gpu/venv/bin/python) does not have (it has vllm)"
    )
    assert problem.fix.startswith("verl.actor_rollout_ref.rollout.name=vllm")
    # an environment with no engine at all cannot train anyway (a CPU login node): not refused
    assert job_needs.check(spec, cfg, JobEnvironment("/cpu/python", "3.11.7", {"tensorboard": "2.21.0"}), {}) == []
    cfg.actor_rollout_ref.rollout.name = "vllm"
    cfg.actor_rollout_ref.model.override_config.attn_implementation = "flash_attention_2"
    (problem,) = job_needs.check(spec, cfg, trains, {})
    assert problem.key == "verl.actor_rollout_ref.model.override_config.attn_implementation"
    assert "needs flash-attn" in problem.message and "sdpa" in problem.fix


def test_an_npu_profiler_on_a_cuda_environment_is_refused(base, cache):
    spec = point([*base, "verl.global_profiler.tool=npu"])
    _, problems = validate_point(spec)
    (problem,) = problems
    assert problem.key == "verl.global_profiler.tool" and "torch_npu" in problem.message


def test_a_removed_rollout_mode_is_refused_as_verls_worker_would(base, cache):
    _, problems = validate_point(point([*base, "verl.actor_rollout_ref.rollout.mode=sync"]))
    (problem,) = problems
    assert problem.key == "verl.actor_rollout_ref.rollout.mode"
    assert problem.message.startswith("verl's RolloutConfig (built as its workers start): Rollout mode 'sync' has been")


def test_the_jobs_verl_must_be_in_the_tested_range(bare_venv, cache):
    # issue 35 item 6: another verl than this command's is validated against (tests/unit/test_verl_range.py),
    # no longer refused for differing; a job's Python without verl, or with one outside the range, is
    from grpokit.validate.job_environment import local_verl

    here, folder = local_verl()
    assert here and folder and folder.endswith("verl")
    assert job_needs.check_verl(job_environment.ask(sys.executable)) == []
    python = str(bare_venv / "bin" / "python")
    (problem,) = job_needs.check_verl(job_environment.ask(python))
    assert (problem.point, problem.key) == ("all points", "cluster.python")
    assert problem.message == f"the job's Python ({python}) has no verl: the job runs verl's trainer"
    # an older verl there (its metadata, as pip writes it): outside the range, named with where it is
    info = site_packages(bare_venv) / "verl-0.7.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.7.1\n")
    job_environment.ask.cache_clear()
    (problem,) = job_needs.check_verl(job_environment.ask(python))
    assert problem.message.startswith(f"verl 0.7.1 (the job's Python ({python})) is outside the releases")
    assert problem.fix.startswith("install a verl in >=0.8.0,<0.10 in the job's environment")


def test_megatron_packages_the_training_environment_lacks_are_refused_naming_each(base, cache):
    """ppo_megatron_trainer's actor (strategy megatron) needs megatron-core and the model bridge verl builds
    it with: Megatron-Bridge by default, mbridge with vanilla_mbridge=true (verl's MegatronEngine)."""
    packages = {"vllm": "0.24.0", "verl": "0.9.1", "tensorboard": "2.21.0"}
    from grpokit.config.verl_schema import MEGATRON_CONFIG_NAME, VerlConfigRef, compose_verl

    spec = point(base)
    cfg = compose_verl(["trainer.logger=[console]"], VerlConfigRef(MEGATRON_CONFIG_NAME))  # verl's own composition
    actor = cfg.actor_rollout_ref.actor
    assert actor.strategy == "megatron" and not actor.megatron.vanilla_mbridge
    (problem,) = job_needs.check(spec, cfg, JobEnvironment("/gpu/python", "3.12.3", packages), {})
    assert (problem.key, problem.message) == (
        "verl.actor_rollout_ref.actor.strategy",
        "strategy megatron needs megatron-core, which the job's Python (/gpu/python) does not have",
    )
    assert problem.fix.startswith("pip install 'grpokit[megatron]' (or megatron-core) in the job's environment")
    packages["megatron-core"] = "0.16.0"
    (problem,) = job_needs.check(spec, cfg, JobEnvironment("/gpu/python", "3.12.3", packages), {})
    assert problem.key == "verl.actor_rollout_ref.actor.megatron.vanilla_mbridge"
    assert problem.message.startswith("strategy megatron needs megatron-bridge, which")
    cfg.actor_rollout_ref.actor.megatron.vanilla_mbridge = True
    (problem,) = job_needs.check(spec, cfg, JobEnvironment("/gpu/python", "3.12.3", packages), {})
    assert problem.message.startswith("strategy megatron needs mbridge, which")
    packages["mbridge"] = "0.15.1"
    assert job_needs.check(spec, cfg, JobEnvironment("/gpu/python", "3.12.3", packages), {}) == []



def test_megatron_packages_are_needed_in_an_environment_without_a_rollout_engine(base, cache):
    """A Megatron script (here ``model_engine=megatron``, verl's group choice) needs megatron-core wherever the
    job's Python runs it, as a logger's package is: an environment without vLLM is still refused for it
    (verl's examples/ppo_trainer/run_qwen3_8b_megatron.sh: verl's own run stops there)."""
    from grpokit.config.verl_schema import VerlConfigRef, compose_verl

    cfg = compose_verl(["trainer.logger=[console]"], VerlConfigRef(groups=("model_engine=megatron",)))
    packages = {"verl": "0.9.1", "tensorboard": "2.21.0"}  # no rollout engine: the kit's CPU environments
    (problem,) = job_needs.check(point(base), cfg, JobEnvironment("/cpu/python", "3.12.3", packages), {})
    assert problem.message == (
        "strategy megatron needs megatron-core, which the job's Python (/cpu/python) does not have"
    )
    fsdp = compose_verl(["trainer.logger=[console]"])
    assert job_needs.check(point(base), fsdp, JobEnvironment("/cpu/python", "3.12.3", packages), {}) == []
