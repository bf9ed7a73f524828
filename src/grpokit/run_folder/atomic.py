"""Atomic writes for every file of a run or sweep folder (docs/run-folder.md).

Readers on the login node and on other nodes see the old file or the new one, never half of one:
each write goes to a temp file in the same folder, is fsynced, then ``os.replace``-d over the target.
The file gets the mode a plain ``open(path, "w")`` would give (0o666 less the process's umask), so a
labmate who may read the sweep folder can run ``status`` and ``report`` on it: ``tempfile.mkstemp``
alone creates 0o600 files, which ``os.replace`` would carry over. Nothing secret is written through
here (keys travel in the environment only).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc/self/status``,
    kernel >= 4.7); elsewhere set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def now() -> str:
    """UTC time, ISO 8601 with seconds (``2026-12-01T12:00:00+00:00``): every time stamp the kit writes."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_bytes_atomic(path: Path | str, payload: bytes, *, exclusive: bool = False) -> None:
    """Write ``payload`` through a temp file ``.<name>.*`` in the same folder, fsync, ``os.replace`` it.

    The folder is created when missing; the file's mode is ``0o666 & ~umask``. On any failure (a
    full disk, a signal) the temp file is removed and ``path`` keeps its previous content; the
    exception propagates. ``exclusive``: create ``path`` only where none exists (``os.link`` of the
    temp file, atomic); FileExistsError when one does, which is left as it is.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)
            Path(tmp).unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path | str, data: Any, *, exclusive: bool = False) -> None:
    """:func:`write_bytes_atomic` of ``data`` as indented JSON (``default=str`` for paths, enums, times)."""
    write_bytes_atomic(path, json.dumps(data, indent=2, default=str).encode(), exclusive=exclusive)
