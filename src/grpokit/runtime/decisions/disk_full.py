"""A full disk named as the cause of an attempt's end, from the first attempt (issue 24).

A full (or over-quota) file system under the run or checkpoint folder is a failure no other node
can fix: those folders are on a shared file system. The trainer's own error is often a symptom
(torch's ``RuntimeError: basic_ios::clear: iostream error`` when a shard cannot be written), so
the driver also looks at the free space of the folders it writes to. :func:`cause` is pure: the
error lines and the free bytes in, ``disk full writing <path>`` (or None) out. The attempt then
ends ``failed`` with ``ended_by: disk_full``, which :mod:`grpokit.runtime.decisions.retry` does not retry.
"""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

#: A folder with less free space than this counts as full (a write of one more shard fails).
MIN_FREE_BYTES = 1 << 20
#: errnos no other node can fix: ENOSPC (no space left), EDQUOT (quota exceeded).
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = re.compile(
    rf"\[Errno (?:{errno.ENOSPC}|{errno.EDQUOT})\][^:]*(?::\s*'(?P<path>[^']+)')?"
    r"|No space left on device|Disk quota exceeded"
)


def error_path(exc: BaseException | None) -> str | None:
    """The file an ENOSPC/EDQUOT ``OSError`` names ('' when it names none); None for other errors."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return str(exc.filename or "")
        exc = exc.__cause__ or exc.__context__
    return None


def cause(lines: list[str], free_bytes: dict[str, int | None], min_free: int = MIN_FREE_BYTES) -> str | None:
    """``disk full writing <path>`` when the error lines say ENOSPC/EDQUOT or a watched folder is full.

    Args:
        lines: error lines of the attempt (the driver's exception, the first error in trainer.log).
        free_bytes: ``{folder: free bytes}`` of the folders the attempt writes to (None: unknown).
        min_free: a folder with fewer free bytes is full.

    Returns:
        The path an ENOSPC line names, else the first full folder; None when neither.
    """
    for line in lines:
        m = _FULL_TEXT.search(line or "")
        if m:
            full = [f for f, free in free_bytes.items() if free is not None and free < min_free]
            where = m.group("path") if m.groupdict().get("path") else (full[0] if full else None)
            return f"disk full writing {where}" if where else "disk full (No space left on device)"
    for folder, free in free_bytes.items():
        if free is not None and free < min_free:
            return f"disk full writing {folder} ({free} bytes free)"
    return None


def free_bytes(folders: list[Path | str]) -> dict[str, int | None]:
    """Free bytes of each folder's file system (None where it cannot be asked)."""
    out: dict[str, int | None] = {}
    for folder in folders:
        try:
            out[str(folder)] = shutil.disk_usage(folder).free
        except OSError:
            out[str(folder)] = None
    return out
