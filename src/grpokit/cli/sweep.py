"""Sweep verl GRPO training over Slurm (or run it on this workstation).

    python launch/sweep.py -m cluster=slurm verl.data.train_batch_size=8,16 \
        verl.actor_rollout_ref.rollout.n=4,8 verl.data.max_response_length=512,1024

Every point is composed with verl's own schema and validated (verl's ``validate_config`` and the
kit's checks) before anything is submitted; ``dry_run=true`` shows each point's verl command and
the Slurm request instead. Points go to Slurm as one job array; the command returns once they are
queued (``wait=true`` blocks) and leaves a manifest in the sweep folder for status.py, report.py
and resubmit.py.
"""

from __future__ import annotations

import contextlib
import os
import sys

import hydra
from omegaconf import DictConfig

from grpokit.paths import CONFIG_DIR


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    # Never reached: every command is a Hydra multirun (a command without -m is a one-point sweep,
    # see `entry`), and the kit's launcher validates and submits points instead of calling this.
    raise SystemExit("grpokit sweep: --run is not supported; every command is a sweep (-m is optional)")


#: Hydra's flags that choose what the command does (one at most); without any, the command sweeps.
_MODE_FLAGS = ("-m", "--multirun", "-r", "--run", "-c", "--cfg", "-i", "--info", "-sc", "--shell-completion")


def as_sweep(argv: list[str]) -> list[str]:
    """``argv`` with ``-m`` added when it names no mode: one point goes through the same launcher as a sweep.

    Hydra runs a command without ``-m`` as a single job in its own process instead of handing it
    to a launcher; the kit's checks, manifest and Slurm submission live in its launcher
    (:mod:`hydra_plugins.grpokit_launcher`), so a single point is a sweep of one point.
    """
    if any(a in _MODE_FLAGS or a.startswith(("--cfg=", "--info=")) for a in argv):
        return argv
    return ["-m", *argv]


@contextlib.contextmanager
def mode_without_composing():
    """Within the block, Hydra learns a command's mode without composing the whole config for it.

    Hydra 1.3 composes the config once only to read ``hydra.mode`` (``Hydra.get_mode``), then
    again to run; with the kit's config (verl's whole tree inside) that is about 0.6 s. The kit's
    config leaves ``hydra.mode`` unset, for which ``get_mode`` answers None, and every kit command
    is a multirun (:func:`as_sweep`), which Hydra then runs with ``hydra.mode=MULTIRUN``; so
    answering None without composing runs the same sweep (``tests/unit/test_sweep_command.py``
    checks the kit's config leaves the mode unset). A ``hydra.mode=RUN`` typed with ``-m`` loses
    only Hydra's warning that it is overridden.
    """
    from grpokit.config.hydra_internals import mode_not_composed

    with mode_not_composed():
        yield


def preflight(argv: list[str]) -> list[str]:
    """Check the command line before Hydra composes anything; returns the argv to hand to Hydra.

    ``verl_script=<file>`` becomes the script's settings (:func:`grpokit.config.verl_script.expand_argv`).
    Misspelt keys (verl's and the kit's) get "did you mean ...", wrong types and negative sizes are
    refused on the key typed, and ``+key`` for a key the kit already sets becomes an update.
    Exits 2 with one line per problem.
    """
    from grpokit.config.verl_script import ScriptError, expand_argv
    from grpokit.validate import SweepValidationError
    from grpokit.validate.command_line import check
    from grpokit.validate.group_choices import group_problems

    try:  # verl_script=<file>: the script's settings first (grpokit.config.verl_script)
        argv, said = expand_argv(argv, os.environ)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    for line in said:
        print(line, file=sys.stderr)
    argv, problems = check(argv)
    problems = [*group_problems(argv), *problems]  # experiment=<typo>: the real choices, not Hydra's dump
    if problems:
        print(SweepValidationError(problems), file=sys.stderr)
        sys.exit(2)
    return argv


def show_resolved(argv: list[str]) -> int:
    """``--cfg job --resolve``: the composed config with every interpolation resolved.

    Hydra's own ``--resolve`` resolves the kit's tree in one piece and fails on verl's
    interpolations, which are relative to verl's root (``${trainer.project_name}``) or yield a list
    (``${.save_contents}``). Here the kit's sections are resolved in the kit's tree and ``verl`` is
    what the point's trainer gets: verl's config with the point's overrides, resolved as verl does.
    A key that cannot be resolved is named.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from grpokit.config.compose import compose_kit
    from grpokit.config.point import build_point
    from grpokit.config.verl_schema import apply_overrides
    from grpokit.validate import SweepValidationError

    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    try:
        cfg = compose_kit(overrides)
        spec = build_point(cfg, index=0, kit_overrides=overrides, swept={})
        kit = {k: cfg[k] for k in cfg if k not in ("verl", "hydra")}
        shown = {
            k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k] for k in kit
        }
        shown["verl"] = OmegaConf.to_container(apply_overrides(spec.verl_overrides), resolve=True)
    except SweepValidationError as exc:
        print(exc, file=sys.stderr)
        return 2
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "the config"
        print(f"{key}: cannot be resolved: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(OmegaConf.to_yaml(shown))
    return 0


def entry(argv: list[str] | None = None) -> int:
    """``grpokit sweep ...`` / ``python launch/sweep.py ...``: exit status 0, 1 (a point failed) or 2 (refused)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--help" in args or "-h" in args:
        from grpokit.config.usage import usage

        print(usage())
        return 0
    if "--resolve" in args and any(a in ("--cfg", "-c") for a in args) and "hydra" not in args and "all" not in args:
        return show_resolved(args)
    from grpokit.validate import check_stream, overlap

    overlap.start(check_stream)  # verl is imported (for validate_config) on the other core while Hydra composes
    try:
        sys.argv[1:] = as_sweep(preflight(args))
        from grpokit.config import store

        store.register()  # verl's defaults in Hydra's config store
        try:
            with mode_without_composing():
                main()
        except SystemExit as exc:  # Hydra's main exits on its own
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return 0
    finally:
        overlap.stop()


if __name__ == "__main__":
    sys.exit(entry())
