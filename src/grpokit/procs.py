"""Starting and stopping the job's processes so that none outlives the job.

A job that reports success while a child still holds its allocation (submitit#1731, #1677) is the
failure this module exists for: every process is started in its own session with its own log
file, the driver becomes a child subreaper (orphans of its children come back to it instead of
init), and stopping a process means stopping its whole tree: SIGTERM, a grace period, SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

log = logging.getLogger(__name__)
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
try:  # loaded once here: the child between fork and exec should do as little as possible
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux); False elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def ignore_usr2() -> None:
    # Slurm delivers the job's warning signal to every process of the step; only the driver acts
    # on it, and a process left at the default action (terminate) would die from it.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def _child_setup() -> None:
    """In the child between fork and exec: ignore USR2; die with the driver (PR_SET_PDEATHSIG).

    If the driver itself is killed (SIGKILL after Slurm's KillWait, OOM), nobody is left to run
    the teardown; the kernel then SIGKILLs each direct child, so no server keeps the allocation.
    """
    ignore_usr2()
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start(
    cmd: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    """Start ``cmd`` in a new session, stdout and stderr appended to ``log_path``.

    The child ignores SIGUSR2 (only the driver acts on Slurm's warning) and is SIGKILLed by the
    kernel if the driver dies before stopping it.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_child_setup,
        )


def tree(pid: int) -> list[psutil.Process]:
    """``pid`` and all its descendants (those still alive)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_processes(procs: list[psutil.Process], grace_s: float) -> list[int]:
    """SIGTERM ``procs``, wait up to ``grace_s`` seconds, SIGKILL what is left.

    Returns:
        The pids that had to be killed with SIGKILL.
    """
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    return [p.pid for p in alive]


def stop_tree(pid: int, grace_s: float, name: str = "") -> None:
    """Stop ``pid`` and every descendant (collected before signalling, so none is orphaned).

    The root gets SIGTERM first and ``grace_s`` to shut its own children down (``ray start
    --block`` and vLLM clean up after themselves); what is left then gets SIGTERM, and SIGKILL a
    few seconds later.
    """
    procs = tree(pid)
    if not procs:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        procs[0].send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    if not alive:
        return
    killed = kill_processes(alive, grace_s=3)
    log.warning(
        "%s: %d process(es) outlived SIGTERM of their root by %.0f s; SIGKILLed %s",
        name or pid,
        len(alive),
        grace_s,
        killed,
    )


def stop_all_children(grace_s: float) -> None:
    """Last resort at exit: stop every descendant of this process, however it got there."""
    me = psutil.Process()
    children = me.children(recursive=True)
    if children:
        log.info("stopping %d leftover process(es): %s", len(children), [c.pid for c in children])
        kill_processes(children, grace_s)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_until(predicate, timeout_s: float, interval_s: float = 0.2, alive=None) -> bool:
    """Poll ``predicate`` until true (returns True) or ``timeout_s`` passes (False).

    ``alive``, when given, is polled too: when it returns False the wait ends at once (False).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        if alive is not None and not alive():
            return False
        time.sleep(interval_s)
    return bool(predicate())
