"""Where the kit's own files live: the repository root, its configs and the package."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: The checkout holding ``configs/``, ``launch/`` and ``logs/`` (the package is installed editable).
REPO_ROOT = PACKAGE_DIR.parent.parent
CONFIG_DIR = REPO_ROOT / "configs"
DEFAULT_LOGS_ROOT = REPO_ROOT / "logs"


def package_file(relative: str) -> Path:
    """Absolute path of a file shipped inside the ``grpokit`` package (e.g. a tool config).

    Raises:
        FileNotFoundError: the file is not part of the package.
    """
    path = PACKAGE_DIR / relative
    if not path.exists():
        raise FileNotFoundError(f"{relative} is not a file of the grpokit package ({PACKAGE_DIR})")
    return path
