"""``python -m grpokit.runtime.processes.ray_worker``: join this job's Ray head from another node.

Started by the driver through ``srun --overlap`` on each node after the first. It reserves this
node's ports (see :mod:`grpokit.runtime.processes.ports`), runs ``ray start --block`` as its child and stays
its parent, so that the reservation lives as long as the Ray worker and the worker's leftovers are
cleared when it ends:

- USR2 is ignored here and, inherited through fork and exec, by every Ray process of this node:
  ``scancel --signal=USR2`` (and any ``--signal`` without ``B:``) signals every job step, and
  the warning is the driver's alone; a Ray worker that died of it took verl's actors on this node
  with it, before the save they were needed for.
- On SIGUSR1 (the driver stopping this step: ``srun`` passes USR1 on, while it answers SIGTERM by
  SIGKILLing the step) or SIGTERM (Slurm ending the job) the Ray worker's process tree is stopped;
  then Ray's temp dir is removed with the private folder around it (:mod:`grpokit.runtime.processes.ray_temp`)
  and the ports released. A worker SIGKILLed by Slurm leaves that folder (mode 700, never reachable by
  another user); the next Ray start of the user on that node removes it.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from grpokit import procs
from grpokit.runtime.processes import ray_cli, ray_temp
from grpokit.runtime.processes.ports import release_ports
from grpokit.runtime.processes.ray_cluster import (
    WORKER_PORT_BLOCK,
    port_args,
    reserve_node_ports,
    short_temp_dir,
)

#: Seconds ``ray start`` gets to stop its node after SIGTERM before its tree is killed; below the
#: driver's own grace for this step (``runtime.kill_grace_s``), so the clean-up runs before that ends.
STOP_GRACE_S = 3.0


#: Stop signals received (SIGUSR1, SIGTERM, SIGINT), recorded from the start so that none is lost
#: between making the temp dir and starting Ray.
_STOP: list[int] = []


def _on_stop(signum, _frame) -> None:
    _STOP.append(signum)


def _ray_child_setup() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # USR1 is for this process only (Ray keeps USR2 ignored)


def main() -> None:
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # before anything else: see the module docstring
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_stop)
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True, help="the head's host:port")
    parser.add_argument("--num-cpus", type=int, required=True)
    parser.add_argument("--num-gpus", type=int, required=True)
    parser.add_argument("--worker-ports", type=int, default=WORKER_PORT_BLOCK, help="size of the worker port range")
    parser.add_argument("--object-store-memory", type=int, default=None, help="bytes (the head's size)")
    args = parser.parse_args()
    head_host = args.address.rsplit(":", 1)[0]
    # The address the head reaches this node on: the interface that routes to the head.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((head_host, 1))
        node_ip = s.getsockname()[0]
    node_ports, block = reserve_node_ports(node_ip, args.worker_ports)
    temp_dir = short_temp_dir()
    cmd = [
        *ray_cli.argv_prefix(),
        "start",
        "--block",
        f"--address={args.address}",
        f"--node-ip-address={node_ip}",
        f"--num-cpus={args.num_cpus}",
        f"--num-gpus={args.num_gpus}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
        *([f"--object-store-memory={args.object_store_memory}"] if args.object_store_memory else []),
        *port_args(node_ports, block, args.worker_ports),
    ]
    print(" ".join(cmd), flush=True)
    sys.exit(supervise(cmd, temp_dir))


def supervise(cmd: list[str], temp_dir: Path, grace_s: float = STOP_GRACE_S) -> int:
    """Run ``cmd`` (``ray start --block``) until it exits or SIGUSR1/SIGTERM/SIGINT arrives; then
    stop its tree, remove ``temp_dir`` and release this process's port reservation.

    Returns:
        ``ray start``'s exit code, or 0 when it was stopped on a signal.
    """
    stop = _STOP
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_stop)
    procs.become_subreaper()  # Ray's daemons come back here if ray start exits before them
    rc = 0
    try:
        if not stop:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, preexec_fn=_ray_child_setup)
            ray_temp.add_pid(temp_dir, proc.pid)
            while proc.poll() is None and not stop:
                time.sleep(0.5)
            if proc.poll() is None:
                print(f"{signal.Signals(stop[0]).name}: stopping the Ray worker", flush=True)
                procs.stop_tree(proc.pid, grace_s, name="ray worker")
            rc = proc.wait()
    finally:
        procs.stop_all_children(grace_s)
        ray_temp.remove(temp_dir)
        release_ports()
    print(f"ray worker ended ({'stopped' if stop else f'exit {rc}'}); removed {temp_dir}", flush=True)
    return 0 if stop else rc


if __name__ == "__main__":
    main()
