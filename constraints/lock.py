"""Write ``constraints/cpu.txt``, the kit's lock: the exact versions its test suite passed with.

Usage (``make lock`` runs it): ``python constraints/lock.py FREEZE`` where FREEZE is the output of
``pip freeze --exclude-editable`` in a fresh environment that installed the kit with
``-c constraints/gpu.txt`` (so the packages both sets share take the GPU bundle's versions).

Format: a pip constraints file (https://pip.pypa.io/en/stable/user_guide/#constraints-files), one
``name==version`` a line, names normalised as PEP 503 does, local version labels dropped
(``torch==2.13.0`` matches the ``2.13.0+cpu`` build). A package both files pin at different versions
needs its reason in ``REASONS``; without one, writing the lock fails naming it (exit 2).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

HERE = Path(__file__).resolve().parent
CPU_LOCK = HERE / "cpu.txt"
GPU_SET = HERE / "gpu.txt"

#: Packages the CPU lock and the GPU set pin at different versions on purpose, with the reason.
REASONS: dict[str, str] = {
    "torch": (
        "login nodes and CI install torch's CPU build 2.13.0 (the one on this project's CI disk); the GPU "
        "nodes have 2.11.0+cu130, which verl 0.9.1's vllm extra pins"
    ),
}

_HEADER = """\
# grpokit's lock for the CPU side (login nodes, CI, `make install` without a GPU): the exact versions
# `make test` passed with. Written by `make lock` (constraints/lock.py); do not edit by hand.
# Use: pip install -c constraints/cpu.txt -e '.[dev]'   (torch first: see README, "Installing").
# The packages it shares with constraints/gpu.txt (the GPU bundle) have the same versions, except:
"""


def normalise(name: str) -> str:
    """PEP 503's normal form of a distribution name (``Rank_BM25`` -> ``rank-bm25``): packaging's
    ``canonicalize_name``."""
    return canonicalize_name(name)


def read_pins(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` of a file of ``name==version`` lines; comments and blanks skipped.

    Raises ValueError naming file and line for a line that is not an exact pin.
    """
    pins: dict[str, str] = {}
    for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;+]+)(\+\S+)?", line)
        if not m:
            raise ValueError(f"{path}:{n}: not a 'name==version' pin: {raw!r}")
        pins[normalise(m.group(1))] = m.group(2)
    return pins


def differences(cpu: dict[str, str], gpu: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{name: (cpu version, gpu version)}`` for the packages both pin at different versions."""
    return {n: (cpu[n], gpu[n]) for n in sorted(cpu.keys() & gpu.keys()) if cpu[n] != gpu[n]}


def render(cpu: dict[str, str], gpu: dict[str, str]) -> str:
    """The lock file's text; raises ValueError naming a difference without a reason in REASONS."""
    diff = differences(cpu, gpu)
    unexplained = [n for n in diff if n not in REASONS]
    if unexplained:
        raise ValueError(
            f"the CPU set and constraints/gpu.txt differ on {', '.join(unexplained)} "
            f"({'; '.join(f'{n} {diff[n][0]} vs {diff[n][1]}' for n in unexplained)}): "
            "pin them alike, or write the reason in constraints/lock.py REASONS"
        )
    notes = [f"#   {n} {c} (GPU {g}): {REASONS[n]}" for n, (c, g) in diff.items()]
    notes += [f"#   {n} {cpu[n]} (not in gpu.txt): {why}" for n, why in REASONS.items() if n in cpu and n not in gpu]
    body = [f"{n}=={v}" for n, v in sorted(cpu.items())]
    return _HEADER + "\n".join(notes or ["#   (none)"]) + "\n" + "\n".join(body) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python constraints/lock.py FREEZE_FILE", file=sys.stderr)
        return 2
    try:
        text = render(read_pins(Path(argv[0])), read_pins(GPU_SET))
    except (OSError, ValueError) as e:
        print(f"lock: {e}", file=sys.stderr)
        return 2
    CPU_LOCK.write_text(text)
    print(f"lock: wrote {CPU_LOCK} ({text.count(chr(10)) - text.count(chr(10) + '#')} pins)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
