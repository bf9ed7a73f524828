"""``python -m grpokit.runtime.processes.ray_probe``: wait until a Ray cluster has all its nodes and GPUs.

Prints one JSON line ``{"nodes": N, "cpus": C, "gpus": G, "seconds": S}`` and exits 0 when the
cluster has ``--nodes`` alive nodes each with ``--gpus-per-node`` GPUs; exits 2 at the deadline.
Runs as its own process so that the job's driver never becomes a Ray driver itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=float, default=0)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    start = time.monotonic()
    deadline = start + args.timeout
    import ray

    while True:
        try:
            ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
            break
        except Exception as exc:  # the GCS may not listen yet
            if time.monotonic() > deadline:
                print(f"cannot connect to {args.address}: {exc}", file=sys.stderr)
                return 2
            time.sleep(0.3)
    while True:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        gpus = [n.get("Resources", {}).get("GPU", 0) for n in alive]
        if len(alive) >= args.nodes and all(g >= args.gpus_per_node for g in gpus):
            cpus = sum(n.get("Resources", {}).get("CPU", 0) for n in alive)
            print(
                json.dumps(
                    {
                        "nodes": len(alive),
                        "cpus": cpus,
                        "gpus": sum(gpus),
                        "seconds": round(time.monotonic() - start, 2),
                    }
                )
            )
            return 0
        if time.monotonic() > deadline:
            print(f"{len(alive)}/{args.nodes} nodes alive, GPUs per node {gpus}", file=sys.stderr)
            return 2
        time.sleep(0.3)


if __name__ == "__main__":
    sys.exit(main())
