"""The verl releases the kit is tested with, and validation against the job's own verl (issue 35, item 6).

Both ends of the range are real verl releases: the lock's (the kit's own environment) and the
lowest, ``constraints/verl-lowest.txt``, unpacked by ``make verl-lowest`` and put first on
``PYTHONPATH`` by a wrapper interpreter (as a fork's checkout on ``PYTHONPATH`` is). A fork is a
copy of the installed verl with one config default changed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.config.verl_script import expand_argv
from grpokit.validate import check_each, check_in_job_verl, job_environment, job_needs, job_verl, verl_release

REPO = Path(__file__).resolve().parents[2]
LOWEST = next(
    line.split("==")[1].split()[0]
    for line in (REPO / "constraints" / "verl-lowest.txt").read_text().splitlines()
    if line.startswith("verl==")
)


def lowest_python() -> str:
    """The wrapper ``make verl-lowest`` writes (``make test`` names it in GRPOKIT_VERL_LOWEST_PYTHON)."""
    named = os.environ.get("GRPOKIT_VERL_LOWEST_PYTHON")
    path = Path(named) if named else REPO / ".verl-lowest" / LOWEST / "python"
    if not path.exists():
        if named:
            pytest.fail(f"{path} is missing: make verl-lowest builds it")
        pytest.skip("the lowest verl is not built here: make verl-lowest")
    return str(path)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE_DIR", str(tmp_path / "cache"))
    job_environment.ask.cache_clear()
    job_verl._cached_target.cache_clear()
    yield
    job_environment.ask.cache_clear()
    job_verl._cached_target.cache_clear()


@pytest.fixture(params=["lock", "lowest"])
def end(request) -> str:
    """The job's Python at one end of the range."""
    return sys.executable if request.param == "lock" else lowest_python()


GRPO = """set -x
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_files={data}/train.parquet data.val_files={data}/test.parquet \\
    data.train_batch_size=16 data.max_response_length=256 \\
    actor_rollout_ref.model.path={model} \\
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \\
    actor_rollout_ref.actor.use_kl_loss=True \\
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \\
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=5 \\
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \\
    trainer.logger=['console'] trainer.n_gpus_per_node=2 trainer.nnodes=1 trainer.total_epochs=15 $@
"""


def script_points(tmp_path, tiny_model_dir, gsm8k_dir, python: str, *extra: str):
    script = tmp_path / "run.sh"
    script.write_text(GRPO.format(data=gsm8k_dir, model=tiny_model_dir))
    argv = [f"verl_script={script}", "cluster=slurm", f"cluster.python={python}", f"logs_root={tmp_path / 'logs'}"]
    overrides, _ = expand_argv([*argv, *extra], os.environ)
    return [build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})]


def problems_of(specs) -> list:
    """Every point's problems as the sweep command finds them (in the job's verl when it differs)."""
    verl = job_verl.of(specs[0].cluster.python)
    found = check_in_job_verl(specs, verl) if verl.remote else check_each(specs)
    env = job_environment.ask(job_environment.job_python(specs[0].cluster.python))
    return found + job_needs.check_verl(env, str(specs[0].experiment.get("name")))


# --- one place states the range -----------------------------------------------------------------


def test_pyproject_the_lock_and_the_lowest_end_agree_with_the_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    verls = [Requirement(r) for r in lines if Requirement(r).name == "verl"]
    assert len(verls) == 2  # the login nodes' verl and the training extra's verl[vllm]
    assert {str(r.specifier) for r in verls} == {",".join(sorted(verl_release.specifier().split(",")))}, (
        "pyproject.toml's verl range differs from grpokit.validate.verl_release.TESTED"
    )
    locked = [
        line.split("==")[1]
        for line in (REPO / "constraints" / "cpu.txt").read_text().splitlines()
        if line.startswith("verl==")
    ]
    assert locked == ["0.9.1"] and verl_release.within(locked[0])
    assert verl_release.release(LOWEST) == verl_release.TESTED[0]


def test_release_numbers_and_the_range():
    assert verl_release.release("0.9.1.dev0+g1234") == (0, 9, 1)
    assert verl_release.specifier() == ">=0.8.0,<0.10"
    assert verl_release.specifier(verl_release.EXPERIMENTS) == ">=0.9.0,<0.10"
    inside = ["0.8.0", "0.8", "0.9.1", "0.9.2.dev0", "0.9.1+mylab"]
    assert all(verl_release.within(v) for v in inside)
    assert not any(verl_release.within(v) for v in ["0.7.1", "0.10.0", "1.0", "main"])


def test_each_refusal_text():
    where = "at /x/verl, the job's Python (/env/bin/python)"
    (none,) = verl_release.check(None, "the job's Python (/env/bin/python)", packaged=False)
    assert str(none) == (
        "[all points] cluster.python: the job's Python (/env/bin/python) has no verl: the job runs verl's "
        "trainer; fix: pip install 'verl>=0.8.0,<0.10' (or your verl checkout: pip install -e <checkout>) there"
    )
    (old,) = verl_release.check("0.7.1", where, packaged=False)
    assert str(old) == (
        f"[all points] cluster.python: verl 0.7.1 ({where}) is outside the releases the kit is tested with, "
        "verl>=0.8.0,<0.10: the kit sets and reads keys of those releases' config; fix: install a verl in "
        ">=0.8.0,<0.10 in the job's environment (or base your fork on one), or point cluster.python at an "
        "environment that has one"
    )
    assert verl_release.check("0.8.0", where, packaged=False) == []
    (packaged,) = verl_release.check("0.8.0", where, packaged=True, experiment="gsm8k_grpo")
    assert (packaged.key, packaged.fix) == (
        "experiment",
        "install verl>=0.9.0,<0.10 in the job's environment, or run your own verl script "
        "(verl_script=<file>: verl>=0.8.0,<0.10)",
    )
    assert packaged.message.startswith(f"experiment gsm8k_grpo needs verl>=0.9.0,<0.10; {where} has verl 0.8.0: ")
    assert "verl's v1 trainer" in packaged.message
    assert verl_release.check("0.9.0", where, packaged=True, experiment="gsm8k_grpo") == []


# --- validation against both ends --------------------------------------------------------------


def test_the_lowest_release_imports_and_composes_with_the_locked_libraries(cache):
    env = job_environment.ask(lowest_python())
    assert env.error is None and env.version_of("verl") == LOWEST
    assert env.verl_folder.startswith(str(REPO / ".verl-lowest")) or "GRPOKIT_VERL_LOWEST_PYTHON" in os.environ
    assert env.version_of("hydra-core").startswith("1.3") and env.version_of("torch")
    verl = job_verl.target(env)
    assert verl.remote and verl.version == LOWEST
    assert verl.line().startswith(f"verl {LOWEST} at {env.verl_folder} (validated in the job's Python")


def test_a_grpo_script_is_accepted_at_both_ends(end, cache, tmp_path, tiny_model_dir, gsm8k_dir):
    specs = script_points(tmp_path, tiny_model_dir, gsm8k_dir, end)
    assert problems_of(specs) == []
    assert job_verl.of(end).remote == (end != sys.executable)


def test_a_key_the_lowest_release_lacks_is_refused_naming_that_verl(cache, tmp_path, tiny_model_dir, gsm8k_dir):
    key = "verl.actor_rollout_ref.actor.entropy_from_logits_chunk_size=1024"  # verl 0.9's, not 0.8.0's
    assert problems_of(script_points(tmp_path, tiny_model_dir, gsm8k_dir, sys.executable, key)) == []
    python = lowest_python()
    (problem,) = problems_of(script_points(tmp_path, tiny_model_dir, gsm8k_dir, python, key))
    folder = job_environment.ask(python).verl_folder
    assert problem.key == "verl.actor_rollout_ref.actor.entropy_from_logits_chunk_size"
    assert problem.message.startswith("Could not override 'actor_rollout_ref.actor.entropy_from_logits_chunk_size'")
    assert problem.message.endswith(f"(the job's verl {LOWEST} at {folder})")


def test_validate_configs_errors_are_the_jobs_verls(end, cache, tmp_path, tiny_model_dir, gsm8k_dir):
    # 7 prompts x 5 answers on 2 GPUs: verl's validate_config refuses it at both ends
    bad = "verl.data.train_batch_size=7"
    problems = [
        p
        for p in problems_of(script_points(tmp_path, tiny_model_dir, gsm8k_dir, end, bad))
        if p.message.startswith("verl's validate_config")
    ]
    assert problems, "verl's validate_config passed a batch its GPUs do not divide"
    if end != sys.executable:
        assert all(p.message.endswith(f"(the job's verl {LOWEST} at {job_verl.of(end).folder})") for p in problems)


def test_a_packaged_experiment_on_the_lowest_release_is_refused_with_the_reason(cache, base):
    overrides = [*base, "cluster=slurm", f"cluster.python={lowest_python()}"]
    spec = build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})
    env = job_environment.ask(lowest_python())
    (problem,) = job_needs.check_verl(env, str(spec.experiment.get("name")))
    assert problem.key == "experiment" and problem.message.startswith("experiment gsm8k_grpo needs verl>=0.9.0,<0.10")


def test_a_forks_checkout_on_pythonpath_is_validated_with_its_own_defaults(cache, tmp_path, tiny_model_dir, gsm8k_dir):
    installed = Path(job_environment.ask(sys.executable).verl_folder)
    fork = tmp_path / "fork"
    shutil.copytree(installed, fork / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    trainer_yaml = fork / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    text = trainer_yaml.read_text()
    assert "  log_val_generations: 0\n" in text
    trainer_yaml.write_text(text.replace("  log_val_generations: 0\n", "  log_val_generations: 7\n", 1))
    python = tmp_path / "fork-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{fork}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    specs = script_points(tmp_path, tiny_model_dir, gsm8k_dir, str(python))
    verl = job_verl.of(str(python))
    assert verl.remote and verl.folder == str(fork / "verl") and verl.version == job_environment.local_verl()[0]
    ((config, problems),) = job_verl.validate(verl, specs).points
    assert problems == [] and config["trainer"]["log_val_generations"] == 7  # the fork's default
    ((here, _),) = job_verl.validate(
        job_verl.VerlTarget(*job_environment.local_verl(), sys.executable, True), specs
    ).points
    assert here["trainer"]["log_val_generations"] == 0


def test_a_verl_script_on_the_lowest_release_is_noted_without_the_save_on_demand(cache, monkeypatch, capsys):
    from grpokit import problems

    monkeypatch.setattr(problems, "_SAID", set())
    assert job_needs.check_verl(job_environment.ask(lowest_python()), "verl_script") == []
    assert capsys.readouterr().err == (
        f"note: verl {LOWEST} has no v1 trainer (verl.trainer.ppo.v1, from 0.9.0): the kit's save before a "
        "preemption or the time limit does not run; a requeued job resumes from its last "
        "verl.trainer.save_freq checkpoint\n"
    )


def test_a_jobs_python_that_cannot_run_the_checks_is_one_line_per_point(cache, tmp_path, base):
    import subprocess

    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    overrides = [*base, "cluster=slurm", f"cluster.python={python}"]
    spec = build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})
    verl = job_verl.VerlTarget("0.9.1", "/somewhere/verl", python, remote=True)
    ((config, (problem,)),) = job_verl.validate(verl, [spec]).points
    assert config is None and (problem.point, problem.key) == ("all points", "cluster.python")
    assert problem.message.startswith(
        f"verl's checks could not run in the job's Python ({python}, verl 0.9.1 at /somewhere/verl): "
        "ModuleNotFoundError: No module named "
    )
    assert problem.fix == (
        "make the job's environment import verl and grpokit (python -c 'import verl, grpokit'), "
        "or run the sweep command from that environment"
    )
