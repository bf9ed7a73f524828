"""A sweep named on the command line: a folder path, or a sweep's name under the project's logs/.

``grpokit status lr_sweep`` and ``grpokit status logs/lr_sweep`` name the same folder; the commands
that take a sweep folder (status, report, logs, cancel) read their argument through
:func:`sweep_folder_arg`, the one resolver.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

from grpokit.paths import project_dir
from grpokit.run_folder.layout import MANIFEST


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
    names = known_sweeps(logs)
    near = difflib.get_close_matches(str(text), names, n=3, cutoff=0.5) or names[-5:]
    hint = f"; nearest: {', '.join(near)}" if near else f"; no sweep under {logs} yet"
    raise SweepNotFound(f"no sweep folder {str(text)!r} (neither a folder nor a sweep under {logs}){hint}")


def sweep_folder_arg(text: str) -> Path:
    """:func:`resolve_sweep` as an argparse ``type=``: a miss is argparse's one-line error, exit 2."""
    try:
        return resolve_sweep(text)
    except SweepNotFound as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
