"""No-progress watchdog: a trainer that is alive but writes no new step (verl#4709) is noticed.

Without it a hung trainer is found only at the time limit, where the save request is never read
(the hook runs at a step boundary), so the point burns whole allocations. Here the driver's
supervise loop polls the attempt's ``metrics.jsonl`` (verl's file logger, one line per step):

- before the first measured step the trainer gets ``runtime.hang_startup_s`` (model loading,
  vLLM start-up, ``val_before_train``);
- after that the limit is ``max(runtime.hang_floor_s, runtime.hang_step_multiple x step time)``,
  the step time being the longest seen in this attempt (verl's ``timing_s/step``, or the wall time
  between two new steps, which includes validation and saving);
- past the limit the stacks of the trainer's processes are written to
  ``<run>/attempts/<k>/hang_stacks.txt`` (``py-spy dump`` of each process; where py-spy cannot
  attach, e.g. ``kernel.yama.ptrace_scope`` >= 1, the ``faulthandler`` the kit installs in verl's Ray
  workers, see :func:`install_stack_handler`), and the driver stops the trainer and requeues or
  fails the point as ``hung``.

``hang_floor_s: null`` (or 0) turns the watchdog off.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from grpokit.run_folder.layout import HANG_STACKS
from grpokit.slurm import runner
from grpokit.slurm.nodes import srun_step

log = logging.getLogger(__name__)

#: Where processes that installed :func:`install_stack_handler` write their stacks (set by the job).
STACKS_ENV = "GRPOKIT_STACKS_DIR"
#: The signal that makes such a process write its stacks (C-level handler: works while Python is
#: stuck in a C call such as an NCCL wait). Sent only to processes that catch it.
STACK_SIGNAL = signal.SIGUSR1
STACKS_FILE = HANG_STACKS


# -- the decision ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class HangPolicy:
    """Limits in seconds; see the module docstring."""

    floor_s: float = 1800.0
    step_multiple: float = 5.0
    startup_s: float = 3600.0

    @classmethod
    def from_runtime(cls, runtime: Mapping) -> HangPolicy | None:
        """The policy of a point's ``runtime`` section; None when ``hang_floor_s`` is null or 0.

        Raises:
            ValueError: a value is negative or not a number (names the key).
        """
        from grpokit.config.schema import RuntimeConf  # the one default of each key

        runtime = RuntimeConf.of(runtime)
        floor = runtime.hang_floor_s
        if floor in (None, 0, "null"):
            return None
        values = {
            "hang_floor_s": floor,
            "hang_step_multiple": runtime.hang_step_multiple,
            "hang_startup_s": runtime.hang_startup_s,
        }
        out = {}
        for key, value in values.items():
            try:
                out[key] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"runtime.{key} must be a number of seconds, got {value!r}") from None
            if out[key] <= 0:
                raise ValueError(
                    f"runtime.{key} must be > 0, got {value!r} (hang_floor_s: null turns the watchdog off)"
                )
        return cls(out["hang_floor_s"], out["hang_step_multiple"], out["hang_startup_s"])


@dataclasses.dataclass
class Progress:
    """What the trainer has shown so far in this attempt (times from ``time.monotonic()``).

    started_at: trainer launch. last_step / last_step_at: the highest step logged and when it was
    first seen. step_s: the longest step time measured (None before one could be measured).
    """

    started_at: float
    last_step: int | None = None
    last_step_at: float | None = None
    step_s: float | None = None

    def observe(self, step: int, now: float, step_time_s: float | None = None) -> bool:
        """Record a logged step seen at ``now``; True when it is a new (higher) step."""
        if step_time_s is not None and step_time_s > 0:
            self.step_s = max(self.step_s or 0.0, float(step_time_s))
        if self.last_step is not None and step <= self.last_step:
            return False
        if self.last_step_at is not None:
            self.step_s = max(self.step_s or 0.0, now - self.last_step_at)
        self.last_step, self.last_step_at = step, now
        return True


@dataclasses.dataclass(frozen=True)
class Hang:
    """A verdict: no new step for ``idle_s`` seconds against a limit of ``limit_s``."""

    idle_s: float
    limit_s: float
    last_step: int | None
    step_s: float | None
    basis: str  # how the limit was chosen, in words

    def describe(self) -> str:
        where = f"after step {self.last_step}" if self.last_step is not None else "before its first step"
        return f"no new step for {self.idle_s:.0f} s {where} (limit {self.limit_s:.0f} s: {self.basis})"


def limit_s(policy: HangPolicy, progress: Progress) -> tuple[float, str]:
    """The current no-progress limit in seconds and how it was chosen."""
    if progress.step_s is None:
        return policy.startup_s, f"runtime.hang_startup_s={policy.startup_s:g}, no step time measured yet"
    scaled = policy.step_multiple * progress.step_s
    if scaled > policy.floor_s:
        return scaled, f"runtime.hang_step_multiple={policy.step_multiple:g} x step time {progress.step_s:.1f} s"
    return policy.floor_s, (
        f"runtime.hang_floor_s={policy.floor_s:g} > {policy.step_multiple:g} x step time {progress.step_s:.1f} s"
    )


def decide(policy: HangPolicy, progress: Progress, now: float) -> Hang | None:
    """A :class:`Hang` when the trainer has made no progress for longer than the limit, else None."""
    since = progress.last_step_at if progress.last_step_at is not None else progress.started_at
    limit, basis = limit_s(policy, progress)
    idle = now - since
    if idle <= limit:
        return None
    return Hang(idle_s=idle, limit_s=limit, last_step=progress.last_step, step_s=progress.step_s, basis=basis)


# -- the polling helper ------------------------------------------------------------------------------
class Watchdog:
    """Reads new lines of ``metrics_path`` (verl's file logger) and applies :func:`decide`.

    ``poll()`` is cheap (reads only what was appended) and rate-limited to ``interval_s``.
    """

    def __init__(
        self, policy: HangPolicy, metrics_path: Path, started_at: float | None = None, interval_s: float = 2.0
    ):
        self.policy = policy
        self.path = Path(metrics_path)
        self.progress = Progress(started_at=time.monotonic() if started_at is None else started_at)
        self.interval_s = interval_s
        self._offset = 0
        self._partial = b""
        self._next = 0.0

    def _read_new(self, now: float) -> None:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset:  # truncated (reopened with "wb")
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            try:
                record = json.loads(line)
                step = int(record["step"])
            except (ValueError, KeyError, TypeError):
                continue
            timing = (record.get("data") or {}).get("timing_s/step")
            self.progress.observe(step, now, timing if isinstance(timing, int | float) else None)

    def poll(self, now: float | None = None) -> Hang | None:
        """Read what the trainer logged since the last call; a :class:`Hang` past the limit."""
        now = time.monotonic() if now is None else now
        if now < self._next:
            return None
        self._next = now + self.interval_s
        self._read_new(now)
        return decide(self.policy, self.progress, now)


# -- stacks ---------------------------------------------------------------------------------------------
def install_stack_handler() -> bool:
    """In a process of the trainer: write all threads' stacks to ``$GRPOKIT_STACKS_DIR/<host>-<pid>.txt``
    on :data:`STACK_SIGNAL` (``faulthandler``, works even while Python is blocked in C code).

    Called by the kit's Ray worker hook in every Ray worker of verl. No-op (False) without the
    environment variable or when the signal already has a handler.
    """
    folder = os.environ.get(STACKS_ENV)
    if not folder or signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
        return False
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        fh = open(Path(folder) / f"{socket.gethostname()}-{os.getpid()}.txt", "a")  # noqa: SIM115 (kept open)
        faulthandler.register(STACK_SIGNAL, file=fh, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        return False
    globals()["_stack_file"] = fh  # keep the file object alive
    return True


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (``SigCgt`` in /proc; a process without
    one would be killed by it)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def py_spy() -> str | None:
    """The ``py-spy`` executable (beside this interpreter, else on PATH), or None."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _describe(pid: int) -> str:
    try:
        text = " ".join(psutil.Process(pid).cmdline()).strip()
        return text if len(text) <= 160 else text[:157] + "..."
    except psutil.Error:
        return "(gone)"


def dump_stacks(targets: Sequence[tuple[str, int]], stacks_dir: Path | None, timeout_s: float = 20.0) -> str:
    """Stacks of ``(label, pid)`` processes on this node, as text: ``py-spy dump`` where it can attach,
    else the process's faulthandler (when it catches :data:`STACK_SIGNAL`), else a line saying why not."""
    spy = py_spy()
    sections: dict[int, str] = {}
    signalled: list[int] = []
    for label, pid in targets:
        head = f"=== {label} pid {pid} on {socket.gethostname()}: {_describe(pid)}"
        problem = "py-spy is not installed"
        if spy:
            try:
                out = subprocess.run(
                    [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout_s
                )
                if out.returncode == 0 and out.stdout.strip():
                    sections[pid] = f"{head} [py-spy] ===\n{out.stdout.rstrip()}\n"
                    continue
                problem = f"py-spy failed: {(out.stderr or out.stdout).strip()[-300:]}"
            except subprocess.TimeoutExpired:
                problem = f"py-spy did not answer within {timeout_s:.0f} s"
        if stacks_dir is not None and catches(pid, STACK_SIGNAL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, STACK_SIGNAL)
                signalled.append(pid)
                sections[pid] = f"{head} [faulthandler; {problem}] ===\n"
                continue
        sections[pid] = f"{head} ===\n(no stack: {problem}; the process has no faulthandler for {STACK_SIGNAL.name})\n"
    if signalled:
        time.sleep(1.0)  # faulthandler writes from the signal handler, at once
        for pid in signalled:
            path = Path(stacks_dir) / f"{socket.gethostname()}-{pid}.txt"
            text = path.read_text(errors="replace") if path.exists() else ""
            sections[pid] += text.rstrip() + "\n" if text.strip() else f"(nothing written to {path})\n"
    return "\n".join(sections[pid] for _, pid in targets)


#: Ray's own helper processes and pooled workers that run nothing: not the trainer's, left out.
_RAY_SYSTEM = ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::IDLE")


def ray_workers_under(pid: int) -> list[psutil.Process]:
    """Ray's worker processes (``ray::...`` titles: tasks and actors) among ``pid``'s descendants,
    without Ray's own agents and idle pooled workers, and the processes those workers started
    (vLLM's engine processes, dataloader workers)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    workers: set[int] = set()
    out = []
    for child in children:  # psutil lists parents before their children
        with contextlib.suppress(psutil.Error):
            argv = child.cmdline()
            title = argv[0].strip() if argv else ""
            if (title.startswith("ray::") and not title.startswith(_RAY_SYSTEM)) or child.ppid() in workers:
                workers.add(child.pid)
                out.append(child)
    return out


def local_targets(trainer_pid: int, ray_pid: int | None) -> list[tuple[str, int]]:
    """The trainer's process tree and the Ray workers under this node's ``ray start``."""
    from grpokit import procs

    targets = [("trainer", p.pid) for p in procs.tree(trainer_pid)]
    if ray_pid is not None:
        seen = {pid for _, pid in targets}
        for worker in ray_workers_under(ray_pid):
            if worker.pid not in seen:
                with contextlib.suppress(psutil.Error):
                    targets.append((worker.cmdline()[0].strip(), worker.pid))
    return targets


def remote_dump_command(node: str, address: str, stacks_dir: Path) -> list[str]:
    """``srun`` command that prints the stacks of this job's Ray workers on another node."""
    return srun_step(
        [node], "grpokit.runtime.processes.watchdog", f"--ray-address={address}", f"--stacks-dir={stacks_dir}"
    )


def write_stacks_file(
    path: Path,
    hang: Hang,
    local: Sequence[tuple[str, int]],
    stacks_dir: Path | None,
    remote: Sequence[tuple[str, list[str]]] = (),
    timeout_s: float = 120.0,
) -> int:
    """Write ``hang_stacks.txt``: the verdict, then every process's stacks; returns the bytes written.

    ``remote`` is ``(node, command)`` pairs (:func:`remote_dump_command`), run at once, all within ``timeout_s``.
    """
    started: list[tuple[str, subprocess.Popen | Exception]] = []
    for node, cmd in remote:  # all nodes at once, while this node's stacks are taken
        try:
            started.append((node, runner.start(cmd)))
        except OSError as exc:
            started.append((node, exc))
    deadline = time.monotonic() + timeout_s
    parts = [f"# {hang.describe()}\n# written {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n", dump_stacks(local, stacks_dir)]
    for node, proc in started:
        if isinstance(proc, Exception):
            text = f"({type(proc).__name__}: {proc})"
        else:
            try:
                out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
                text = out if out.strip() else f"(nothing; exit {proc.returncode}: {err.strip()[-500:]})"
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                text = f"(no answer within {timeout_s:.0f} s)"
        parts.append(f"##### node {node}\n{text}")
    data = "\n".join(parts)
    path.write_text(data)
    return len(data)


def tidy_stacks_dir(folder: Path) -> None:
    """Remove the empty per-process files of :func:`install_stack_handler` (and the folder if empty)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for f in folder.iterdir():
        with contextlib.suppress(OSError):
            if f.is_file() and f.stat().st_size == 0:
                f.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()


def _find_ray_start(address: str) -> int | None:
    """This node's ``ray start --block --address=<address>`` (the job's Ray worker node)."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info["cmdline"] or []
        if "start" in argv and "--block" in argv and f"--address={address}" in argv:
            return proc.info["pid"]
    return None


def main(argv: list[str] | None = None) -> None:
    """``python -m grpokit.runtime.processes.watchdog --ray-address A``: print the stacks of the job's Ray
    workers on this node (run by the driver through ``srun --overlap`` on the other nodes)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ray-address", required=True)
    parser.add_argument("--stacks-dir", default=None)
    args = parser.parse_args(argv)
    ray_pid = _find_ray_start(args.ray_address)
    if ray_pid is None:
        print(f"(no ray start --address={args.ray_address} on {socket.gethostname()})")
        return
    targets = []
    for worker in ray_workers_under(ray_pid):
        with contextlib.suppress(psutil.Error):
            targets.append((worker.cmdline()[0].strip(), worker.pid))
    if not targets:
        print(f"(no Ray worker processes under ray start pid {ray_pid} on {socket.gethostname()})")
        return
    print(dump_stacks(targets, Path(args.stacks_dir) if args.stacks_dir else None), flush=True)


if __name__ == "__main__":
    main()
