"""Start ``vllm serve`` for evaluation and wait until it answers.

The API key reaches vLLM through ``VLLM_API_KEY`` in its environment, never on argv (argv is
visible to every user of the node through ``ps``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from grpokit.runtime import procs

log = logging.getLogger(__name__)


@dataclass
class ServeSpec:
    """One server: model (path or name), served name, host, port, GPU ids (CUDA_VISIBLE_DEVICES),
    and vLLM's memory/length settings."""

    model: str
    served_name: str
    host: str
    port: int
    cuda_devices: str | None = None
    gpu_memory_utilization: float = 0.4
    max_model_len: int = 2048
    max_num_seqs: int = 16

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def vllm_command(spec: ServeSpec, python: str | None = None) -> list[str]:
    """argv of ``vllm serve`` through its module entry point (no console script needed)."""
    return [
        python or sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        spec.model,
        "--served-model-name",
        spec.served_name,
        "--host",
        spec.host,
        "--port",
        str(spec.port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        str(spec.max_model_len),
        "--gpu-memory-utilization",
        str(spec.gpu_memory_utilization),
        "--max-num-seqs",
        str(spec.max_num_seqs),
        "--limit-mm-per-prompt",
        json.dumps({"image": 0, "video": 0}),
    ]


def place(n_servers: int, gpus: list[str]) -> list[str | None]:
    """GPU for each server: one each when there are enough, else all on the first GPU (memory
    fractions keep them apart); None when no GPU is visible (vLLM decides)."""
    if not gpus:
        return [None] * n_servers
    if len(gpus) >= n_servers:
        return gpus[:n_servers]
    return [gpus[0]] * n_servers


def start(argv: list[str], api_key: str, log_path: Path, cuda_devices: str | None = None) -> subprocess.Popen:
    """Start a server process in its own session, output to log_path, key in VLLM_API_KEY."""
    env = dict(os.environ, VLLM_API_KEY=api_key)
    if cuda_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_devices
    return procs.start(argv, log_path, env=env)


def is_ready(base_url: str, api_key: str) -> bool:
    """True when ``GET <base_url>/models`` answers 200 with the key."""
    try:
        r = httpx.get(f"{base_url}/models", headers={"Authorization": f"Bearer {api_key}"}, timeout=5.0)
    except httpx.HTTPError:
        return False
    return r.status_code == 200


def wait_ready(base_url: str, api_key: str, proc: subprocess.Popen, timeout_s: float, log_path: Path) -> float:
    """Wait until the server answers; returns seconds waited.

    Raises RuntimeError with the log's tail when the process exits or timeout_s passes.
    """
    t0 = time.monotonic()
    ok = procs.wait_until(
        lambda: is_ready(base_url, api_key), timeout_s, interval_s=1.0, alive=lambda: proc.poll() is None
    )
    if not ok:
        why = f"exited with {proc.returncode}" if proc.poll() is not None else f"not ready after {timeout_s:.0f} s"
        raise RuntimeError(f"server at {base_url} {why}; last lines of {log_path}:\n{procs.tail(log_path)}")
    return time.monotonic() - t0


def stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Stop the server and its children (vLLM forks engine processes)."""
    procs.stop_tree(proc.pid, grace_s)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.warning("server pid %d still running after stop", proc.pid)
