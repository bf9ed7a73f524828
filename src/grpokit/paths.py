"""Where the kit's files live: the package (with its configs) and the project folder.

The *package* (``grpokit``, with its default ``configs/`` inside it) is code: from a checkout (``pip install -e``)
or a wheel, or a sweep's frozen copy of it. The *project folder* holds what a user makes and runs:
``data/``, ``models/``, ``logs/`` (the config key ``repo_root``). It is, first that applies:

1. ``$GRPOKIT_HOME``;
2. the checkout the package sits in (``<checkout>/src/grpokit`` with the kit's ``pyproject.toml``);
3. the current directory (a wheel installed into a virtual environment).

The project folder's own ``configs/`` (same layout: ``experiment/``, ``model/``, ``hardware/``,
``cluster/``) is on Hydra's search path before the package's (:func:`config_dirs`): a researcher's
experiment, hardware profile or cluster file lives there, a new name adds an option and a packaged
name is overridden, without editing the installed package.

Sweeps resolve ``repo_root`` at submission and their points carry the resolved paths, so a job runs
against the same folders wherever its code is loaded from.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: The kit's Hydra config tree (groups experiment/ model/ hardware/ cluster/), shipped in the wheel.
CONFIG_DIR = PACKAGE_DIR / "configs"


def _checkout_root() -> Path | None:
    root = PACKAGE_DIR.parent.parent
    pyproject = root / "pyproject.toml"
    if PACKAGE_DIR.parent.name == "src" and pyproject.is_file() and 'name = "grpokit"' in pyproject.read_text():
        return root
    return None


def project_dir() -> Path:
    """The folder holding ``data/``, ``models/`` and ``logs/`` (see the module docstring for the order)."""
    if os.environ.get("GRPOKIT_HOME"):
        return Path(os.environ["GRPOKIT_HOME"]).resolve()
    return _checkout_root() or Path.cwd().resolve()


def project_config_dir() -> Path:
    """``<project folder>/configs``: the user's config files (it may not exist)."""
    return project_dir() / "configs"


def config_dirs() -> list[Path]:
    """The config folders Hydra searches, the first that holds a file wins: the project's
    ``configs/`` when it exists (and is not the package's own), then the package's."""
    user = project_config_dir()
    return [user, CONFIG_DIR] if user.is_dir() and user.resolve() != CONFIG_DIR.resolve() else [CONFIG_DIR]


def config_groups() -> set[str]:
    """The config groups (``experiment``, ``model``, ``hardware``, ``cluster``, and any group a
    project file adds); internal folders (``_*``, ``.*``) left out."""
    return {p.name for d in config_dirs() for p in d.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}


def group_files(group: str) -> dict[str, Path]:
    """The option files of ``group`` by option name (``gsm8k_grpo`` -> its YAML), the project's file
    where both have one; internal ``_*`` files left out; sorted by name."""
    found: dict[str, Path] = {}
    for folder in reversed(config_dirs()):
        for path in (folder / group).glob("*.yaml"):
            if not path.stem.startswith("_"):
                found[path.stem] = path
    return dict(sorted(found.items()))


def package_file(relative: str) -> Path:
    """Absolute path of a file shipped inside the ``grpokit`` package (e.g. a tool config).

    Raises:
        FileNotFoundError: the file is not part of the package.
    """
    path = PACKAGE_DIR / relative
    if not path.exists():
        raise FileNotFoundError(f"{relative} is not a file of the grpokit package ({PACKAGE_DIR})")
    return path


def kit_command(command: str, args: str = "") -> str:
    """How the user types the kit's ``command`` (``prepare-data``, ``status``, ...) here, for fix hints.

    In a checkout (its ``launch/<module>.py`` shim exists): ``python launch/prepare_data.py <args>``,
    as the README writes it; a wheel installed outside a checkout has no ``launch/``:
    ``grpokit prepare-data <args>`` (the console script, ``[project.scripts]``).
    """
    root = _checkout_root()
    module = command.replace("-", "_")
    typed = (
        f"python launch/{module}.py"
        if root is not None and (root / "launch" / f"{module}.py").is_file()
        else f"grpokit {command}"
    )
    return f"{typed} {args}".rstrip()
