"""The variables the job sets for the trainer, recorded in ``env.json`` (``trainer_env``) and named
in ``verl_cmd.sh``'s header, so the command can be run again by hand with the same environment
(``WANDB_MODE=offline`` on a node without internet, ``runtime.env``, the sidecars' URLs, Ray's).

A secret is recorded by name only, its value ``<set>``: a name with ``API_KEY``, ``TOKEN``,
``SECRET`` or ``PASSWORD`` in it, or ending in ``_KEY`` (``WANDB_API_KEY``, ``HF_TOKEN``, the
sidecars' keys), unless it names a file or folder (``*_PATH``, ``*_FILE``, ``*_DIR``: a path,
e.g. Ray's ``RAY_AUTH_TOKEN_PATH``, whose file only the job's user can read).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from grpokit.run_folder.atomic import write_json_atomic

HIDDEN = "<set>"
_SECRET_PARTS = ("API_KEY", "TOKEN", "SECRET", "PASSWORD")
_PATH_SUFFIXES = ("_PATH", "_FILE", "_DIR")


def is_secret(name: str) -> bool:
    """Whether ``name``'s value is kept out of the run folder (see the module docstring)."""
    upper = name.upper()
    if upper.endswith(_PATH_SUFFIXES):
        return False
    return any(part in upper for part in _SECRET_PARTS) or upper.endswith("_KEY")


def set_by_job(env: Mapping[str, str], inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of the trainer's ``env`` the job added or changed relative to ``inherited``
    (default: this process's environment, what the job itself was started with); sorted by name,
    secrets' values replaced by ``<set>``."""
    inherited = os.environ if inherited is None else inherited
    return {k: (HIDDEN if is_secret(k) else str(v)) for k, v in sorted(env.items()) if inherited.get(k) != v}


def record(env_json: Path, env: Mapping[str, str], inherited: Mapping[str, str] | None = None) -> list[str]:
    """Add ``trainer_env`` (:func:`set_by_job`) to ``env_json`` (the run folder's env.json, written
    at the attempt's start); returns the names, for verl_cmd.sh's header."""
    import json

    recorded = set_by_job(env, inherited)
    data = json.loads(env_json.read_text()) if env_json.is_file() else {}
    data["trainer_env"] = recorded
    write_json_atomic(env_json, data)
    return list(recorded)
