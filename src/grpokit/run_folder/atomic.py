"""Atomic writes for every file of a run or sweep folder (docs/run-folder.md).

Readers on the login node and on other nodes see the old file or the new one, never half of one:
each write goes to a temp file in the same folder, is fsynced, then ``os.replace``-d over the target.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def now() -> str:
    """UTC time, ISO 8601 with seconds (``2026-12-01T12:00:00+00:00``): every time stamp the kit writes."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_bytes_atomic(path: Path | str, payload: bytes) -> None:
    """Write ``payload`` through a temp file ``.<name>.*`` in the same folder, fsync, ``os.replace`` it.

    The folder is created when missing. On any failure (a full disk, a signal) the temp file is
    removed and ``path`` keeps its previous content; the exception propagates.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path | str, data: Any) -> None:
    """:func:`write_bytes_atomic` of ``data`` as indented JSON (``default=str`` for paths, enums, times)."""
    write_bytes_atomic(path, json.dumps(data, indent=2, default=str).encode())
