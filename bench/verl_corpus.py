"""verl's and verl-recipe's published launch scripts through ``verl_script=``: the kit's verdict next to
verl's own (issue 34 item 7).

    python bench/verl_corpus.py --verl <verl> --recipe <verl-recipe>           # table and counts
    python bench/verl_corpus.py --verl <verl> --recipe <verl-recipe> --truth   # also verl's verdict, now
    python bench/verl_corpus.py --verl <verl> --recipe <verl-recipe> --write-arguments
    python bench/verl_corpus.py                                                # no checkout: the stored lists

``<verl>`` / ``<verl-recipe>``: a git directory holding the commits below (a clone, or the bare mirror
``fetch`` gives: /work/.mirror/verl-project+verl/repo) or a plain folder of the files at that commit.
The kit stores none of the scripts: the corpus is ``tests/data/verl_scripts/expected.yaml`` (each
script's path at its commit -> the verdict verl gives, the kit's reason, the class) and the scripts are
taken from the checkouts into a temporary folder laid out as verl publishes them (verl-recipe is verl's
``recipe/`` submodule: its scripts run from verl's root, ``python -m recipe.<name>.<entry>``).

Each script is run as a user runs it: ``verl_script=<file>`` with the data and model paths replaced by
the prepared GSM8K and the tiny model (the user's own files here), in an environment with ``DEVICE=gpu``
(the examples' knob; their default asks ``python3 -c 'import torch_npu'``), ``LORA_ADAPTER_PATH``
(which the adapter script requires) and a W&B key (the scripts log to W&B).

Without checkouts, the verdict is computed on the argument lists bash passes to ``python3`` for each
``verl.trainer.main_ppo`` script of one of each kind (:data:`STORED`; ``tests/data/verl_corpus_arguments.txt``,
written by ``--write-arguments``; the data and model paths the user replaces are ``{mine}``); the other
rows need the checkouts (a recipe's entry: its module and config).

verl's own verdict (``--truth``): the arguments bash passes to ``python3 -m`` (python3, python, uv and
ray replaced by printers, nothing else run), composed by Hydra from the entry's config (verl 0.9.1's
``ppo_trainer`` / ``ppo_megatron_trainer``, or the recipe's config folder with verl's on the search path,
as the recipe's ``@hydra.main`` does), then verl's ``validate_config`` (its LoRA-rank check, which needs
vLLM, left out as the kit defers it to the job); a recipe's entry must import with the job's verl
(``python -c 'import recipe.<...>'`` in the environment the job runs); then the job environment: a
package the script needs (megatron-core, torch_npu, a logger's package) that the environment lacks is a
refusal; the rollout engine (vLLM, SGLang) is the job node's and checked there, as the kit does. A
``reward_model.*`` / ``custom_reward_function.*`` key on verl's ``main_ppo`` is a refusal too: verl
composes it, but 0.9.1's ``main_ppo`` never reads it (its source; the table of such keys is verl's own
``migrate_legacy_reward_impl``, grpokit.config.verl_legacy); a recipe's own entry reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
EXPECTED = REPO / "tests" / "data" / "verl_scripts" / "expected.yaml"
ARGUMENTS = REPO / "tests" / "data" / "verl_corpus_arguments.txt"
#: The published sources: the prefix of an ``expected.yaml`` key -> (repository, full commit, the folder
#: under verl's root where its files lie: verl-recipe is verl's ``recipe/`` submodule).
SOURCES = {
    "verl@1dda039b9c63": ("verl-project/verl", "1dda039b9c6311889a9c9a26040677e1254814f9", ""),
    "verl-recipe@48ea0a797fa2": ("verl-project/verl-recipe", "48ea0a797fa29867ea0ad92aff7d284eec7d4be3", "recipe"),
}
#: Classes of a verdict against verl's.
CLASSES = ("right accept", "right refuse", "false refuse", "false accept", "wrong fix")


def expected() -> dict[str, dict]:
    """``{"<source>@<commit12>/<path>": {verdict, reason, class, truth}}`` (see the file's header)."""
    return yaml.safe_load(EXPECTED.read_text())


def split(name: str) -> tuple[str, str]:
    """``("verl@1dda039b9c63", "examples/x.sh")`` of an ``expected.yaml`` key."""
    source, _, path = name.partition("/")
    return source, path


def materialize(given: Path, source: str, into: Path) -> Path:
    """The files of ``source`` at its commit under ``into`` (``into/<its folder>``), from a git directory
    (``git archive``) or a plain folder (copied, its ``.git`` left out); returns that folder."""
    _repo, commit, folder = SOURCES[source]
    dest = into / folder if folder else into
    dest.mkdir(parents=True, exist_ok=True)
    git = ["git", f"--git-dir={given}"] if (given / "objects").is_dir() else ["git", "-C", str(given)]
    is_git = subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode == 0
    if is_git:
        archive = subprocess.run([*git, "archive", "--format=tar", commit], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    elif given.is_dir() and not (given / ".git").exists() and not (given / "objects").is_dir():
        shutil.copytree(given, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
    else:
        raise SystemExit(f"{given}: holds no commit {commit} of {SOURCES[source][0]}: fetch it, or give a folder of "
                         "its files at that commit")
    return dest


def user_env(home: Path) -> dict[str, str]:
    """The environment a user runs the script's sweep in (see the module docstring)."""
    adapter = home / "adapter"
    adapter.mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(home),
        "PWD": str(home),
        "DEVICE": "gpu",
        "LORA_ADAPTER_PATH": str(adapter),
        "WANDB_API_KEY": "a-users-key",
    }


#: Keys whose values are the user's own files (replaced; ``{mine}`` in the stored argument lists).
REPLACED = ("data.train_files", "data.val_files", "actor_rollout_ref.model.path", "critic.model.path")


def replacements(text: str, model: Path, data: Path) -> list[str]:
    """The script's data and model paths as the user replaces them (verl's keys, no ``verl.``)."""
    out = [f"data.train_files={data}/train.parquet", f"data.val_files={data}/test.parquet",
           f"actor_rollout_ref.model.path={model}"]
    if "critic.model.path" in text:
        out.append(f"critic.model.path={model}")
    return out


def kit_verdict(script: Path, model: Path, data: Path, logs: Path, env: dict[str, str],
                root: Path | None = None) -> tuple[str, str]:
    """("accept", "") or ("refuse", the kit's first lines): ``verl_script=`` as the sweep command reads it
    (run from ``root``, verl's checkout, as the scripts say), the command-line check, the point, every
    validation of the point (what ``dry_run=true`` runs)."""
    from hydra.errors import ConfigCompositionException

    from grpokit.config.compose import compose_kit
    from grpokit.config.point import build_point
    from grpokit.config.verl_script import ScriptError, expand_argv
    from grpokit.validate import SweepValidationError, validate_point
    from grpokit.validate.command_line import check

    typed = [f"verl.{r}" for r in replacements(script.read_text(), model, data)]
    argv = [f"verl_script={script}", *typed, f"logs_root={logs}", "sweep_name=corpus"]
    old, cwd = dict(os.environ), Path.cwd()
    os.environ.update(env)
    os.chdir(root or cwd)
    try:
        try:
            argv, _ = expand_argv(argv, env)
        except ScriptError as exc:
            return "refuse", str(exc).replace(f"{root}/" if root else "\0", "")
        argv, problems = check(argv)
        if not problems:
            try:
                spec = build_point(compose_kit(argv), index=0, kit_overrides=argv, swept={})
                problems = validate_point(spec)[1]
            except SweepValidationError as err:
                problems = err.problems
            except ConfigCompositionException as err:  # the sweep prints Hydra's message (first line here)
                return "refuse", str(err).splitlines()[0]
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(old)
    if not problems:
        return "accept", ""
    return "refuse", " | ".join(f"{p.key}: {p.message}" for p in problems)


def _kit_verdicts_here(jobs: list[tuple]) -> list[tuple[str, str]]:
    sys.path.insert(0, str(REPO / "src"))
    return [kit_verdict(*job) for job in jobs]


def kit_verdicts_alone(jobs: list[tuple]) -> list[tuple[str, str]]:
    """:func:`kit_verdict` of each job (its arguments) in a fresh process, in order, as one sweep command
    reads one script: the config a script selects (Megatron's, a recipe's) stays this process's
    (``verl_schema.use``), so a process that switched is not used again. Jobs of verl's default entry
    share one process; any other, one each."""
    import multiprocessing

    default = [i for i, job in enumerate(jobs) if _default_entry(job[0])]
    batches = [default] * bool(default) + [[i] for i in range(len(jobs)) if i not in default]
    out: list[tuple[str, str]] = [("", "")] * len(jobs)
    for batch in batches:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            for i, verdict in zip(batch, pool.apply(_kit_verdicts_here, ([jobs[i] for i in batch],)), strict=True):
                out[i] = verdict
    return out


def _default_entry(script: Path) -> bool:
    """Whether the script runs verl's ``main_ppo`` on ``ppo_trainer`` (no other config, no model_engine)."""
    text = script.read_text()
    return "main_ppo" in text and "--config-name" not in text and "model_engine=" not in text and " recipe." not in text


def script_of(arguments: list[str], folder: Path, name: str) -> Path:
    """A launch script that passes ``arguments`` (``-m <module> ...``) to ``python3``, written in ``folder``."""
    script = folder / name.replace("/", "_")
    script.write_text("python3 " + " ".join(shlex.quote(a) for a in arguments) + "\n")
    return script


def stored_arguments() -> dict[str, list[str]]:
    """``{expected.yaml key: arguments}`` from :data:`ARGUMENTS` (``## <key> @ <commit>``, one a line)."""
    out: dict[str, list[str]] = {}
    name = None
    for line in ARGUMENTS.read_text().splitlines():
        if line.startswith("## "):
            name = line[3:].partition(" @ ")[0]
            out[name] = []
        elif line and not line.startswith("#") and name:
            out[name].append(line)
    return out


_SHIM = '#!/bin/sh\n[ "$1" = -c ] && exit 1\nfor a in "$@"; do printf "%s\\n" "$a"; done >> "$CORPUS_ARGS"\n'
_RAY = '#!/bin/sh\nwhile [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n'


def bash_arguments(script: Path, env: dict[str, str], tmp: Path, cwd: Path) -> list[str]:
    """What bash passes to ``python3 -m`` for ``script`` run from ``cwd`` (printers for python3/python/uv,
    ray job submit's command run through), ``--config-name X`` joined as ``--config-name=X``."""
    shim = tmp / "bin"
    shim.mkdir(exist_ok=True)
    for name, text in (("python3", _SHIM), ("python", _SHIM), ("uv", _SHIM), ("ray", _RAY)):
        (shim / name).write_text(text)
        (shim / name).chmod(0o755)
    args = tmp / "args.txt"
    args.write_text("")
    subprocess.run(["bash", str(script)], env={**env, "PATH": f"{shim}:/usr/bin:/bin", "CORPUS_ARGS": str(args)},
                   cwd=cwd, capture_output=True, text=True, timeout=60)
    lines = args.read_text().splitlines()
    lines = lines[lines.index("-m") :] if "-m" in lines else []
    joined: list[str] = []
    for word in lines:
        if joined and joined[-1] in ("--config-path", "--config-name"):
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    return joined


def _recipe_config(module: str, config_path: str | None, name: str | None, root: Path, script: Path):
    """(folder, name) of a recipe entry's config, as its ``@hydra.main`` and the command give it."""
    from grpokit.config.verl_entry import hydra_main_defaults

    source = root / Path(*module.split(".")).with_suffix(".py")
    main_path, main_name = hydra_main_defaults(source)
    path, name = config_path or main_path, name or main_name
    for folder in (source.parent / path, script.parent / path, root / path):
        if (folder / f"{(name or '').removesuffix('.yaml')}.yaml").is_file():
            return folder.resolve(), name.removesuffix(".yaml")
    return None, name


def verl_verdict(arguments: list[str], script: Path, root: Path, model: Path, data: Path) -> tuple[str, str]:
    """verl alone on bash's arguments: Hydra's composition of the entry's config, ``validate_config``,
    a recipe entry's import, the packages (see the module docstring)."""
    from grpokit.config.verl_schema import lean_imports, verl_config_dir
    from grpokit.validate.verl_check import _without_vllm_checks

    if not arguments:
        return "refuse", "bash runs no python -m command"
    module = arguments[1]
    name, path = None, None
    overrides = []
    for a in arguments[2:]:
        if a.startswith("--config-name="):
            name = a.split("=", 1)[1]
        elif a.startswith("--config-path="):
            path = a.split("=", 1)[1]
        else:
            overrides.append(a)
    recipe = module != "verl.trainer.main_ppo"
    search = []
    if recipe:
        folder, name = _recipe_config(module, path, name, root, script)
        if folder is None:
            return "refuse", f"{module}: its config {name} is not in the checkout"
        search = [f"hydra.searchpath=[file://{verl_config_dir()}]"]
    else:
        folder, name = verl_config_dir(), (name or "ppo_trainer").removesuffix(".yaml")
    if recipe:  # `python -m` imports the entry before its @hydra.main composes anything
        probe_root = root.parent / "probe"  # recipe/ alone: not verl's checkout, whose verl/ hides the job's verl
        probe_root.mkdir(exist_ok=True)
        if not (probe_root / "recipe").exists():
            (probe_root / "recipe").symlink_to(root / "recipe")
        probe = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=probe_root, capture_output=True,
                               text=True, env={**os.environ, "PYTHONPATH": str(probe_root)}, timeout=300)
        if probe.returncode:
            return "refuse", f"{module} does not import with the job's verl: {probe.stderr.strip().splitlines()[-1]}"
    text = script.read_text()
    replaced = {r.split("=", 1)[0] for r in replacements(text, model, data)}
    overrides = [o for o in overrides if o.lstrip("+").split("=", 1)[0] not in replaced]
    overrides += replacements(text, model, data)
    lean_imports()
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder), version_base=None):
            cfg = compose(config_name=name, overrides=[*search, *overrides])
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(config=_without_vllm_checks(cfg), use_reference_policy=need_reference_policy(cfg),
                            use_critic=need_critic(cfg))
    except Exception as exc:  # verl's refusal, whatever its type
        cause = exc.__cause__ or exc
        return "refuse", (str(cause).splitlines() or [type(cause).__name__])[0]
    finally:
        GlobalHydra.instance().clear()
    from grpokit.config.verl_legacy import legacy, translate

    ignored = [o.lstrip("+").split("=", 1)[0] for o in overrides if legacy(o.lstrip("+").split("=", 1)[0])]
    if ignored and not recipe:  # 0.9.1's main_ppo reads reward.*; it translates these only in its fully-async entry
        return "refuse", f"main_ppo never reads {ignored[0]} (verl reads {translate(ignored[0]) or 'nothing'})"
    needs = []
    loggers = cfg.trainer.logger if not isinstance(cfg.trainer.logger, str) else [cfg.trainer.logger]
    needs += [str(x) for x in loggers if str(x) not in ("console", "file")]  # tensorboard: torch's SummaryWriter
    if "megatron" in name or "model_engine=megatron" in overrides:
        needs.append("megatron.core")
    if str(cfg.trainer.get("device", "cuda")) == "npu":
        needs.append("torch_npu")
    missing = [m for m in needs if not _importable(m)]
    if missing:
        return "refuse", f"the job environment lacks {', '.join(missing)}"
    return "accept", ""


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def classify(kit: tuple[str, str], want: dict) -> str:
    """The kit's verdict against the expected one (decided by verl: ``want``)."""
    if kit[0] == "accept":
        return "right accept" if want["verdict"] == "accept" else "false accept"
    if want["verdict"] == "accept":
        return "false refuse"
    return "right refuse" if want.get("reason", "") in kit[1] else "wrong fix"


#: The scripts whose argument lists are stored (short: one of each kind of verdict and script).
STORED = (
    "verl@1dda039b9c63/examples/grpo_trainer/run_qwen3_4b_fsdp.sh",  # arrays, case "${DEVICE}"
    "verl@1dda039b9c63/examples/ppo_trainer/run_qwen3_8b_fsdp.sh",  # a critic
    "verl@1dda039b9c63/examples/tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh",  # LoRA from an adapter
    "verl@1dda039b9c63/examples/ascend_extras/grpo_trainer/run_qwen3_32b_fsdp.sh",  # +fsdp_config.mixed_precision
    "verl@1dda039b9c63/examples/profile/run_qwen2_5_vl_7b_torch_memory.sh",  # SGLang, a VL model
    "verl@1dda039b9c63/examples/grpo_trainer/run_gpt_oss_20b_fsdp.sh",  # a key verl lacks
    "verl@1dda039b9c63/examples/rollout_correction/run_qwen2_5_7b_fsdp.sh",  # verl's default 8 GPUs
    "verl@1dda039b9c63/examples/ppo_trainer/run_qwen3_8b_megatron.sh",  # model_engine=megatron
    "verl@1dda039b9c63/examples/grpo_trainer/run_qwen2-7b_math_megatron_fsdp.sh",  # ++ below the ref's interpolation
    "verl-recipe@48ea0a797fa2/char_count/train_grpo.sh",  # a key verl 0.9.1 removed
    "verl-recipe@48ea0a797fa2/dapo/test_dapo_7b_math.sh",  # reward_model.* that main_ppo never reads
    "verl-recipe@48ea0a797fa2/dapo/test_dapo_7b_math_megatron.sh",  # ppo_megatron_trainer
    "verl-recipe@48ea0a797fa2/partial_rollout/run/run_qwen3-0.6b_gsm8k_grpo_baseline.sh",  # a logger's package
    "verl-recipe@48ea0a797fa2/retool/run_qwen2-32b_ppo.sh",  # a critic key verl lacks
)


def write_arguments(rows: dict[str, list[str]]) -> None:
    """:data:`ARGUMENTS` from bash's arguments of each ``main_ppo`` script (the user's paths left out)."""
    lines = [
        "# What bash passes to `python3` for each verl.trainer.main_ppo script of",
        "# tests/data/verl_scripts/expected.yaml",
        "# (`python bench/verl_corpus.py --verl <checkout> --recipe <checkout> --write-arguments`: the script run with",
        "# python3/uv replaced by printers, in bench/verl_corpus.py's user environment). Facts about each config,",
        "# no script text. `{mine}`: the user's own file, typed on the sweep command (" + ", ".join(REPLACED) + ").",
        "# `{tmp}`: the run's temporary folder (the user's HOME is {tmp}/home). One script of each kind of verdict",
        "# (bench/verl_corpus.py STORED); a recipe's own entry needs its checkout (module and config).",
        "#",
        "# Format: `## <expected.yaml key> @ <commit>`, then one argument a line (`-m`, the module, the rest).",
    ]
    for name, arguments in sorted(rows.items()):
        lines += ["", f"## {name} @ {SOURCES[split(name)[0]][1]}"]
        lines += [f"{a.split('=', 1)[0]}={{mine}}" if a.lstrip("+").split("=", 1)[0] in REPLACED else a
                  for a in arguments]
    ARGUMENTS.write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    from grpokit.models import build_model
    from grpokit.tasks.gsm8k.data import build

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verl", type=Path, help="verl's git directory or a folder of its files at 1dda039")
    parser.add_argument("--recipe", type=Path, help="verl-recipe's git directory or a folder of its files at 48ea0a7")
    parser.add_argument("--truth", action="store_true", help="also verl's own verdict (needs both checkouts)")
    parser.add_argument("--write-arguments", action="store_true", help=f"write {ARGUMENTS.relative_to(REPO)}")
    args = parser.parse_args(argv)
    checkouts = {"verl@1dda039b9c63": args.verl, "verl-recipe@48ea0a797fa2": args.recipe}
    if (args.truth or args.write_arguments) and not all(checkouts.values()):
        parser.error("--truth and --write-arguments need --verl and --recipe")
    want = expected()
    counts = dict.fromkeys(CLASSES, 0)
    rows: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        root = tmp / "verl"
        for source, given in checkouts.items():
            if given:
                materialize(given.expanduser().resolve(), source, root)
        model = build_model(tmp / "tiny", like="tiny")
        data = tmp / "gsm8k"
        build(os.environ.get("GRPOKIT_GSM8K_SOURCE", str(REPO.parent / "shared" / "data" / "gsm8k")), data)
        env = user_env(tmp / "home")
        stored = {} if all(checkouts.values()) else stored_arguments()
        print(f"{'script':80s} {'kit':7s} {'class':13s} reason")
        jobs: dict[str, tuple] = {}
        for name in sorted(want):
            source, path = split(name)
            if checkouts[source]:
                script = root / SOURCES[source][2] / path
            elif name in stored:
                script = script_of([a.replace("{tmp}", str(tmp)) for a in stored[name]], tmp, name)
            else:
                print(f"{name:80s} {'-':7s} {'-':13s} not stored: needs --verl and --recipe")
                continue
            jobs[name] = (script, model, data, tmp / "logs", env, root if checkouts[source] else None)
        for name, kit in zip(jobs, kit_verdicts_alone(list(jobs.values())), strict=True):
            script = jobs[name][0]
            cls = classify(kit, want[name])
            counts[cls] += 1
            print(f"{name:80s} {kit[0]:7s} {cls:13s} {kit[1][:200]}")
            if args.truth or args.write_arguments:
                bash = bash_arguments(script, env, tmp, root)
                if bash[1:2] == ["verl.trainer.main_ppo"] and name in STORED:
                    rows[name] = [a.replace(str(tmp), "{tmp}") for a in bash]
                if args.truth:
                    verl = verl_verdict(bash, script, root, model, data)
                    print(f"{'':80s} verl: {verl[0]} {verl[1][:200]}")
    if args.write_arguments:
        write_arguments(rows)
    print("counts: " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    sys.exit(main(sys.argv[1:]))
