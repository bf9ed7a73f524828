"""A sweep named on the command line: a folder path, or a sweep's name under the project's logs/.

``grpokit status lr_sweep`` and ``grpokit status logs/lr_sweep`` name the same folder; the commands
that take a sweep folder (status, report, logs, cancel) read their argument through
:func:`sweep_folder_arg`, the one resolver. A name that is no sweep is answered with the nearest
sweep names (:func:`nearest_hint`, also what ``resume=true`` with a mistyped ``sweep_name`` says);
a point's run folder passed where a sweep folder is wanted is told apart by :func:`point_of`.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

from grpokit.paths import project_dir
from grpokit.run_folder.layout import MANIFEST, POINT, STATUS


class SweepNotFound(FileNotFoundError):
    """Neither a folder nor a sweep under logs/; the message is one line with the nearest names."""


def logs_dir() -> Path:
    """``<project folder>/logs``: where sweeps are written (:func:`grpokit.paths.project_dir`)."""
    return project_dir() / "logs"


def known_sweeps(logs: Path) -> list[str]:
    """Sweep folders under ``logs`` (those holding a manifest.json), as paths relative to it,
    one or two levels deep (``lr_sweep``, ``gsm8k_grpo/sweep-1``); sorted."""
    if not logs.is_dir():
        return []
    found = {
        m.parent.relative_to(logs).as_posix() for m in [*logs.glob(f"*/{MANIFEST}"), *logs.glob(f"*/*/{MANIFEST}")]
    }
    return sorted(found)


def resolve_sweep(text: str | Path) -> Path:
    """The folder ``text`` names: itself when it exists, else ``logs/<text>`` (a sweep, or a
    point ``<sweep>/<point>``) of the project folder.

    Raises:
        SweepNotFound: neither exists; the message names the nearest sweeps under logs/.
    """
    path = Path(text)
    if path.exists():
        return path
    logs = logs_dir()
    if not path.is_absolute() and (logs / path).exists():
        return logs / path
    hint = nearest_hint(text, logs)
    raise SweepNotFound(f"no sweep folder {str(text)!r} (neither a folder nor a sweep under {logs}){hint}")


def nearest_hint(text: str | Path, logs: Path) -> str:
    """``"; nearest: a, b"``: the sweeps under ``logs`` closest to the name ``text`` (the last five by
    name when none is close), or ``"; no sweep under <logs> yet"``."""
    names = known_sweeps(logs)
    near = difflib.get_close_matches(str(text), names, n=3, cutoff=0.5) or names[-5:]
    return f"; nearest: {', '.join(near)}" if near else f"; no sweep under {logs} yet"


def point_of(path: Path) -> tuple[Path, str] | None:
    """``(sweep folder, point folder name)`` when ``path`` is a point's run folder (it holds
    ``point.json`` or ``status.json`` and no ``manifest.json``) inside a sweep folder (its parent
    holds ``manifest.json``); None otherwise (a sweep folder, or a folder of neither kind)."""
    path = Path(path)
    if (path / MANIFEST).exists() or not ((path / POINT).exists() or (path / STATUS).exists()):
        return None
    full = path.resolve()
    return (full.parent, full.name) if (full.parent / MANIFEST).exists() else None


def sweep_folder_arg(text: str) -> Path:
    """:func:`resolve_sweep` as an argparse ``type=``: a miss is argparse's one-line error, exit 2."""
    try:
        return resolve_sweep(text)
    except SweepNotFound as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
