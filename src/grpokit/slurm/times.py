"""Slurm's time format, read in one place: ``--time``/``TimeLimit``/``MaxTime`` values and the
elapsed/left times squeue (``%M``, ``%L``) and scontrol (``RunTime``) print.

The format (sbatch(1), ``--time``): ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``. Words Slurm prints where
there is no limit or no value (``UNLIMITED``, ``INFINITE``, ``INVALID``, ``NOT_SET``, ``N/A``, ...)
read as None.
"""

from __future__ import annotations

import math
import re

_NO_VALUE = {"", "UNLIMITED", "INFINITE", "INVALID", "NOT_SET", "N/A", "NONE", "UNKNOWN"}
_DAYS = re.compile(r"(\d+)-(\d+)(?::(\d+))?(?::(\d+))?")
_PLAIN = re.compile(r"(\d+)(?::(\d+))?(?::(\d+))?")


def parse_time_s(text: str | None) -> float | None:
    """Slurm's time format to seconds: ``"5"`` (minutes) -> 300, ``"5:03"`` -> 303,
    ``"1:02:03"`` -> 3723, ``"2-3"`` (days-hours) -> 183600, ``"1-02:03:04"`` -> 93784.

    None for the no-value words and for text that is not in the format.
    """
    if text is None or text.strip().upper() in _NO_VALUE:
        return None
    text = text.strip()
    m = _DAYS.fullmatch(text)
    if m:
        d, h, mi, s = (int(g or 0) for g in m.groups())
        return float(d * 86400 + h * 3600 + mi * 60 + s)
    m = _PLAIN.fullmatch(text)
    if not m:
        return None
    parts = [int(g) for g in m.groups() if g is not None]
    if len(parts) == 1:  # minutes
        return float(parts[0] * 60)
    if len(parts) == 2:  # minutes:seconds
        return float(parts[0] * 60 + parts[1])
    return float(parts[0] * 3600 + parts[1] * 60 + parts[2])


def parse_time_min(text: str | None) -> int | None:
    """Slurm's time format to whole minutes, rounded up (``MaxTime``, ``--time``); None as
    :func:`parse_time_s`."""
    seconds = parse_time_s(text)
    return None if seconds is None else math.ceil(seconds / 60)
