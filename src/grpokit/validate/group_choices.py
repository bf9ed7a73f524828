"""A config-group choice on the command line (``experiment=gsm8k_grpo``) checked against the
kit's config tree before Hydra composes anything.

Hydra's own error for a mistyped choice is a search-path dump (exit 1) that offers the internal
``_grpo`` base too; this check names the key, the real choices (files under ``<group>/`` of the
project's and the package's config folders, not starting with ``_``) and the nearest one, exit 2
like the kit's other command-line refusals.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from grpokit.paths import config_dirs, config_groups, group_files
from grpokit.problems import Problem

ALL = "all points"


def choices(group: str, config_dir: Path | None = None) -> list[str]:
    """The options a user picks for ``group``: ``<group>/*.yaml`` names (of ``config_dir``, else of
    every config folder, grpokit.paths.config_dirs), internal ``_*`` left out; sorted."""
    if config_dir is None:
        return list(group_files(group))
    return sorted(p.stem for p in (config_dir / group).glob("*.yaml") if not p.stem.startswith("_"))


def group_problems(argv: list[str], config_dir: Path | None = None) -> list[Problem]:
    """One problem per ``<group>=<value>`` (``+``/``++`` prefixes, comma-separated sweeps too) whose
    value is no config file of the group. Values Hydra computes (``choice(...)``, ``${...}``) and
    ``null`` are left to Hydra."""
    groups = (
        config_groups()
        if config_dir is None
        else {p.name for p in config_dir.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    )
    problems = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.lstrip("+").split("=", 1)
        if key not in groups or any(c in value for c in "()${}*"):
            continue
        options = choices(key, config_dir)
        for one in value.split(","):
            one = one.strip()
            folders = config_dirs() if config_dir is None else [config_dir]
            if not one or one == "null" or any((d / key / f"{one}.yaml").is_file() for d in folders):
                continue
            near = difflib.get_close_matches(one, options, n=1, cutoff=0.6)
            fix = f"did you mean {key}={near[0]}?" if near else f"choose one of {key}={{{','.join(options)}}}"
            problems.append(Problem(ALL, key, f"no {key} {one!r} (choices: {', '.join(options)})", fix))
    return problems
