"""``python -m grpokit.runtime.ray_worker``: join this job's Ray head from another node.

Started by the driver through ``srun --overlap`` on each node after the first. It reserves this
node's ports (see :mod:`grpokit.runtime.ports`) and then becomes ``ray start --block`` (same pid,
so the reservation lives exactly as long as the Ray worker).
"""

from __future__ import annotations

import argparse
import os
import socket

from grpokit.runtime.ray_cluster import WORKER_PORT_BLOCK, port_args, ray_cli, reserve_node_ports, short_temp_dir


def main() -> None:
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
        *ray_cli(),
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
    os.execv(cmd[0], cmd)  # cmd[0] is an absolute path (the script or this interpreter)


if __name__ == "__main__":
    main()
