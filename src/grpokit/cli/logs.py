"""Show a point's logs of its latest attempt (driver, trainer, sidecars); -f follows them.

    grpokit logs logs/<sweep>/<NNN_point>            # the last lines of each log
    grpokit logs logs/<sweep> 3                      # the same, the point by index (or name)
    grpokit logs logs/<sweep>/<NNN_point> -f         # follow, until the point reaches a final state
    grpokit logs logs/<sweep>/<NNN_point> --only trainer -n 200

Reads the run folder only (docs/run-folder.md: ``attempts/<k>/driver.log``, ``trainer.log``,
``sidecars/<name>.log``). Following prints each new line as ``[<log>] line``, moves on to the next
attempt when the point is requeued (or continues to the next rung of successive halving), and ends
once ``status.json`` is final (Ctrl-C ends it too).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

from grpokit.run_folder import FINAL_STATES, AttemptFolder, RunFolder, SweepFolder
from grpokit.run_folder.locate import sweep_folder_arg
from grpokit.run_folder.metrics import attempt_dirs
from grpokit.run_folder.point_state import below_final_target, halving_final_target
from grpokit.run_folder.status_record import read_status

KINDS = ("driver", "trainer", "sidecars")


class PointNotFound(ValueError):
    """The command line names no run folder; ``str()`` says what to pass."""


def find_run_dir(where: Path, point: str | None) -> Path:
    """The run folder: ``where`` itself, or the point of sweep folder ``where`` named by index,
    name or name prefix (``3``, ``003``, ``003_n-4``).

    Raises:
        PointNotFound: no such folder or point (the message lists the sweep's points).
    """
    where = Path(where)
    if point is None:
        if RunFolder(where).point.exists() or RunFolder(where).attempts_dir.is_dir():
            return where
        if SweepFolder(where).manifest.exists():
            raise PointNotFound(f"{where} is a sweep folder: name a point, e.g. grpokit logs {where} 0")
        raise PointNotFound(f"{where}: not a run folder (no point.json); pass logs/<sweep>/<NNN_point>")
    from grpokit.run_folder.manifest import read_manifest

    points = read_manifest(where).points
    for p in points:
        if point == p.name or (point.isdigit() and int(point) == p.index) or p.name.startswith(point + "_"):
            return Path(p.run_dir)
    names = ", ".join(p.name for p in points[:10]) + (" ..." if len(points) > 10 else "")
    raise PointNotFound(f"no point {point!r} in {where}; its points: {names}")


def log_files(attempt: Path, only: tuple[str, ...] = KINDS) -> list[tuple[str, Path]]:
    """``(label, path)`` of an attempt's logs: driver, trainer, then each sidecar (``sidecar:<name>``)."""
    out = []
    if "driver" in only:
        out.append(("driver", AttemptFolder(attempt).driver_log))
    if "trainer" in only:
        out.append(("trainer", AttemptFolder(attempt).trainer_log))
    if "sidecars" in only and AttemptFolder(attempt).sidecars.is_dir():
        out += [(f"sidecar:{p.stem}", p) for p in sorted(AttemptFolder(attempt).sidecars.glob("*.log"))]
    return out


def latest_attempt(run_dir: Path) -> tuple[int, Path] | None:
    found = attempt_dirs(run_dir)
    return found[-1] if found else None


def tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of a text file (``[]`` when it does not exist)."""
    if not path.exists():
        return []
    with open(path, errors="replace") as f:
        return list(deque(f, maxlen=n))


def show(run_dir: Path, only: tuple[str, ...], n: int, out=sys.stdout) -> int:
    latest = latest_attempt(run_dir)
    if latest is None:
        state = read_status(run_dir).state
        print(f"{run_dir.name}: no attempt has started yet (state {state})", file=out)
        return 0
    k, attempt = latest
    for label, path in log_files(attempt, only):
        lines = tail_lines(path, n)
        print(f"==> {label}: {path} ({'missing' if not path.exists() else f'last {len(lines)} lines'}) <==", file=out)
        out.write("".join(lines))
        if lines and not lines[-1].endswith("\n"):
            out.write("\n")
    return 0


def _final(run_dir: Path) -> bool:
    """The point's status.json is final and its last attempt closed; under successive halving a
    point ``completed`` at a rung is not (the controller continues or prunes it: ``waiting_rung``)."""
    status = read_status(run_dir)
    attempts = status.attempts
    if status.state == "completed" and below_final_target(status, halving_final_target(run_dir.parent)):
        return False
    return status.state in FINAL_STATES and bool(attempts) and not attempts[-1].is_open


def follow(run_dir: Path, only: tuple[str, ...], n: int, interval_s: float = 0.5, out=sys.stdout) -> int:
    """Print the last ``n`` lines of each log, then every new line as it is written, across attempts;
    returns once the point is final and nothing new came."""
    offsets: dict[Path, int] = {}
    partial: dict[Path, str] = {}
    current: int | None = None
    while True:
        latest = latest_attempt(run_dir)
        if latest is not None and latest[0] != current:
            first = current is None  # the attempt running when we started: its last n lines; later ones whole
            current, attempt = latest
            print(f"==> attempt {current}: {attempt} <==", file=out, flush=True)
            for _, path in log_files(attempt, only):
                if first and path.exists():
                    lines = tail_lines(path, n)
                    offsets[path] = path.stat().st_size - sum(len(x.encode()) for x in lines)
        wrote = False
        if latest is not None:
            for label, path in log_files(latest[1], only):
                offsets.setdefault(path, 0)
                if not path.exists() or path.stat().st_size <= offsets[path]:
                    continue
                with open(path, "rb") as f:
                    f.seek(offsets[path])
                    chunk = f.read()
                offsets[path] += len(chunk)
                *lines, partial[path] = (partial.get(path, "") + chunk.decode(errors="replace")).split("\n")
                for line in lines:
                    out.write(f"[{label}] {line}\n")
                wrote = wrote or bool(lines)
            out.flush()
        if not wrote and _final(run_dir) and latest is not None and latest[0] == current:
            state = read_status(run_dir).state
            print(f"==> {run_dir.name} is {state}: nothing more will be written <==", file=out, flush=True)
            return 0
        time.sleep(interval_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "where", type=sweep_folder_arg, help="a run folder, or a sweep folder (or a sweep's name) followed by a point"
    )
    parser.add_argument("point", nargs="?", default=None, help="with a sweep folder: the point's index or name")
    parser.add_argument("-f", "--follow", action="store_true", help="follow the logs until the point is final")
    parser.add_argument("-n", "--lines", type=int, default=40, help="lines of each log shown first (default 40)")
    parser.add_argument("--only", choices=KINDS, action="append", help="only these logs (repeatable)")
    args = parser.parse_args(argv)
    try:
        run_dir = find_run_dir(args.where, args.point)
    except (PointNotFound, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    only = tuple(args.only or KINDS)
    try:
        return follow(run_dir, only, args.lines) if args.follow else show(run_dir, only, args.lines)
    except KeyboardInterrupt:
        return 0


def entry(argv: list[str] | None = None) -> int:
    """``grpokit logs ...`` / ``python launch/logs.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
