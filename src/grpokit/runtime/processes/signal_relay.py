"""``python -m grpokit.runtime.processes.signal_relay --pid <driver pid>``: a job step that passes USR2 to the driver.

The driver runs in the job's batch step (``slurm/train.sbatch`` execs it; the sweep's batch
script runs it under its batch shell, :mod:`grpokit.slurm.executor`). Slurm's own warning is sent
to the batch shell only (``--signal=B:USR2@lead``) and reaches the driver from there, but
``scancel --signal=USR2 <array>_<task>`` without ``--batch`` signals every job step and never the
batch step. This step (``srun --overlap`` on the driver's node, started by the driver,
:func:`start`) is the one that catches it there and signals the driver, which is on the same node.
It exits on SIGTERM (the driver's teardown, the job's end) or once the driver is gone.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from grpokit import procs
from grpokit.slurm.nodes import srun_step


def start(node: str, log_path: Path) -> subprocess.Popen:
    """Start the relay step for this process (the driver) on ``node``, its own node."""
    cmd = srun_step([node], "grpokit.runtime.processes.signal_relay", f"--pid={os.getpid()}")
    return procs.start(cmd, log_path)


def relay(pid: int, poll_s: float = 5.0) -> int:
    """Forward USR2 to ``pid`` until SIGTERM/SIGINT or ``pid`` is gone; returns the exit code."""
    wanted = {signal.SIGUSR2, signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    print(f"relaying USR2 sent to this job step to the driver (pid {pid})", flush=True)
    while True:
        info = signal.sigtimedwait(wanted, poll_s)
        if info is None:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return 0
            continue
        if info.si_signo != signal.SIGUSR2:
            return 0
        print(f"USR2 -> driver (pid {pid})", flush=True)
        try:
            os.kill(pid, signal.SIGUSR2)
        except ProcessLookupError:
            return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid", type=int, required=True, help="the driver's pid (same node)")
    sys.exit(relay(parser.parse_args().pid))


if __name__ == "__main__":
    main()
