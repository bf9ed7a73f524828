"""The trainer process: its command line, its environment, and its files in the attempt folder."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from grpokit.config.point import PointSpec
from grpokit.run_folder.layout import AttemptFolder
from grpokit.runtime import control
from grpokit.runtime.processes.kernels import kernel_overrides
from grpokit.runtime.processes.verl_hooks import SETUP_HOOK


def command(spec: PointSpec, extra_overrides: list[str]) -> list[str]:
    """``runtime.trainer_cmd`` (default ``python -m verl.trainer.main_ppo``) plus the overrides.

    ``python`` as the first word means this interpreter. The job adds the Ray setup hook (the
    kit's checkpoint-on-demand, :mod:`grpokit.runtime.processes.verl_hooks`), the node's kernel choices
    (:func:`grpokit.runtime.processes.kernels.kernel_overrides`) and any sidecar URLs.
    """
    base = list(spec.runtime.trainer_cmd)
    if base[0] == "python":
        base[0] = sys.executable
    hook = f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={SETUP_HOOK}"
    return [*base, *spec.verl_overrides, hook, *kernel_overrides(spec), *extra_overrides]


def environment(run_dir: Path, attempt_dir: Path) -> dict[str, str]:
    """Where verl's loggers write (per attempt) and where the trainer finds the control files.

    verl's file logger truncates its JSONL when opened (``open(..., "wb")``), so each attempt gets
    its own file; :func:`grpokit.run_folder.metrics.write_merged` joins them.
    """
    return {
        "VERL_FILE_LOGGER_PATH": str(AttemptFolder(attempt_dir).metrics),
        "TENSORBOARD_DIR": str(AttemptFolder(attempt_dir).tensorboard),
        control.ENV: str(control.control_dir(run_dir)),
        "GRPOKIT_RUN_DIR": str(run_dir),
        # the kit's faulthandler files in verl's Ray workers (grpokit.runtime.processes.watchdog, hang stacks)
        "GRPOKIT_STACKS_DIR": str(AttemptFolder(attempt_dir).stacks),
        "PYTHONUNBUFFERED": "1",
    }


def entry_environment(spec: PointSpec, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the point's recipe checkout (``verl_entry.pythonpath``) first on ``PYTHONPATH``, so
    ``python -m recipe.<name>.<main>`` imports on the node (Ray's workers inherit it); ``env`` as it is
    for verl's own entry."""
    root = (spec.verl_entry or {}).get("pythonpath")
    if not root:
        return env
    return {**env, "PYTHONPATH": ":".join(p for p in (str(root), env.get("PYTHONPATH")) if p)}


def write_command_file(path: Path, cmd: list[str], env_keys: list[str]) -> None:
    """``verl_cmd.sh``: the exact command, one argument per line, runnable by hand (no secrets)."""
    lines = [
        "#!/usr/bin/env bash",
        "# The trainer command of this point, as the job ran it.",
        "# Environment set by the job (values in env.json's trainer_env, secrets there as <set>):",
        f"# {' '.join(sorted(env_keys))}",
        shlex.quote(cmd[0]) + " \\",
    ]
    lines += [f"  {shlex.quote(a)} \\" for a in cmd[1:-1]]
    lines.append(f"  {shlex.quote(cmd[-1])}")
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
