"""The first real error in a trainer log: the root cause, not the last symptom.

When verl's rollout engine dies (vLLM's engine core fails to start, say
``ModuleNotFoundError: No module named 'flashinfer'``), the trainer goes on and ends much later
with an unrelated message (``RuntimeError: Sync replay buffer selected terminal groups with no
materializable trajectories...``). The end of ``trainer.log`` then names the symptom only. This
module finds the exception line that ended the first Python traceback in the log, after taking
off what Ray and vLLM put in front of each line:

- Ray's worker prefix ``(vLLMHttpServer pid=123, ip=10.0.0.1)`` and its colour codes,
- vLLM's log prefix ``ERROR 12-01 10:03:17 [core.py:708]``,
- Ray's ``[repeated 2x across cluster]`` suffix.

A traceback's last line (``SomeError: message``) is the root cause of a chained traceback too:
Python prints the first exception first.
"""

from __future__ import annotations

import re
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAY_PREFIX = re.compile(r"^\s*\([^()]*\bpid=\d+[^()]*\)\s*")
_LOG_PREFIX = re.compile(
    r"^(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s?)"
)
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_TRACEBACK = "Traceback (most recent call last):"
# `pkg.mod.SomeError: message` or `SomeException` alone, at the start of a line.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::\s.*)?$")
_MAX_CHARS = 500


def clean_line(line: str) -> str:
    """`line` without colour codes, Ray's worker prefix, vLLM's log prefix and Ray's repeat note."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    previous = None
    while previous != line:  # Ray's prefix, then the engine core's own: (vLLMHttpServer ..) (EngineCore_DP0 ..)
        previous, line = line, _LOG_PREFIX.sub("", _RAY_PREFIX.sub("", line))
    return _REPEATED.sub("", line).rstrip()


def first_error(lines: list[str] | tuple[str, ...]) -> str | None:
    """The exception line that ends the first traceback in `lines`, cleaned (at most 500 chars).

    Lines of other processes may interleave with a traceback (Ray merges its workers' output):
    after ``Traceback (most recent call last):`` the first line that reads as an exception
    (``Name: message`` with a name ending in Error/Exception/Exit/Interrupt, not indented) is
    taken. None when the log holds no traceback with such a line.
    """
    in_traceback = False
    for raw in lines:
        line = clean_line(raw)
        if line.strip() == _TRACEBACK:
            in_traceback = True
            continue
        if in_traceback and _EXCEPTION.match(line):
            return line[:_MAX_CHARS]
    return None


def first_error_in_file(path: Path, max_bytes: int = 64 * 1024 * 1024) -> str | None:
    """`first_error` of the log at `path` (its first `max_bytes`); None when it does not exist."""
    try:
        with open(path, "rb") as f:
            text = f.read(max_bytes).decode(errors="replace")
    except FileNotFoundError:
        return None
    return first_error(text.splitlines())
