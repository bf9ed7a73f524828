"""``vllm serve``: its command line, its API key, the readiness wait and the stop: the one copy.

Used by the job's sidecars (:mod:`grpokit.runtime.processes.sidecars`, ``sidecars.<name>.kind: vllm``) and
by ``grpokit serve-eval``. The readiness wait and the stop serve any of the kit's HTTP servers
(the memory server answers the same ``Authorization: Bearer`` check).

The key reaches vLLM through ``VLLM_API_KEY`` in its environment, never on argv (argv is visible to
every user of the node through ``ps``) and never in a file or a log. Flags are ``vllm serve``'s
own (``vllm serve --help``; ``vllm/engine/arg_utils.py``), as verl 0.9.1's ``verl[vllm]`` installs it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from grpokit import procs
from grpokit.config.schema import SidecarConf, VllmSettings

log = logging.getLogger(__name__)

#: vLLM reads its API key from this variable (``vllm serve --api-key`` would put it on argv).
API_KEY_ENV = "VLLM_API_KEY"
#: vLLM opens its internal ports (engine core, ...) from this one upwards.
INTERNAL_PORT_ENV = "VLLM_PORT"


class ServerError(RuntimeError):
    """A server exited during start-up or did not answer in time; the message quotes its log's tail."""


@dataclass(kw_only=True)
class VllmServe(VllmSettings):
    """One ``vllm serve`` process's settings: :class:`grpokit.config.schema.VllmSettings` (vLLM's flag
    names, ``-`` as ``_``, each default stated there) and where it listens.

    model: a Hugging Face folder or hub id. served_model_name: the name clients ask for.
    host, port: where it listens (``http://host:port/v1`` is the OpenAI API).
    """

    model: str
    served_model_name: str
    host: str
    port: int
    # fraction (0, 1] of each visible GPU's total memory vLLM may take (a key of every sidecar)
    gpu_memory_utilization: float = SidecarConf.gpu_memory_utilization

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root, ``http://host:port/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @classmethod
    def from_sidecar(cls, spec: SidecarConf, *, host: str, port: int) -> VllmServe:
        """From a ``sidecars.<name>`` section of kind ``vllm`` (its :class:`VllmSettings`)."""
        own = dataclasses.asdict(spec.settings)
        known = {
            k: v for k, v in own.items() if k not in ("model", "served_model_name", "extra_args") and v is not None
        }
        return cls(
            model=str(spec.model),
            served_model_name=str(spec.served_model_name),
            host=host,
            port=int(port),
            gpu_memory_utilization=spec.gpu_memory_utilization,
            extra_args=[str(a) for a in spec.extra_args or []],
            **known,
        )

    def command(self, python: str | None = None) -> list[str]:
        """argv of ``vllm serve`` through its module entry point (no console script needed); no key."""
        argv = [
            python or sys.executable,
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--dtype",
            str(self.dtype),
            "--max-model-len",
            str(self.max_model_len),
            "--gpu-memory-utilization",
            str(self.gpu_memory_utilization),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--limit-mm-per-prompt",
            json.dumps({"image": 0, "video": 0}),  # text only: no multimodal profiling at start-up
        ]
        if self.enforce_eager:
            argv.append("--enforce-eager")
        return argv + list(self.extra_args)


def new_key() -> str:
    """A fresh API key (URL-safe, 32 characters), one per server and start."""
    return secrets.token_urlsafe(24)


def server_env(
    env: Mapping[str, str],
    key: str,
    *,
    key_env: str = API_KEY_ENV,
    cuda_devices: str | None = None,
    internal_port_base: int | None = None,
) -> dict[str, str]:
    """``env`` plus the server's key (in ``key_env``), its GPUs and vLLM's internal port base."""
    out = dict(env)
    out[key_env] = key
    if cuda_devices is not None:
        out["CUDA_VISIBLE_DEVICES"] = cuda_devices
    if internal_port_base:
        out[INTERNAL_PORT_ENV] = str(internal_port_base)
    return out


def place(n_servers: int, gpus: list[str]) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES for each of ``n_servers``: one GPU each when there are enough, else all
    on the first (their ``gpu_memory_utilization`` keeps them apart); None without GPUs (vLLM decides)."""
    if not gpus:
        return [None] * n_servers
    if len(gpus) >= n_servers:
        return gpus[:n_servers]
    return [gpus[0]] * n_servers


def start(argv: list[str], log_path: Path, env: Mapping[str, str]) -> subprocess.Popen:
    """Start a server in its own session (so :func:`stop` reaches its children), output to ``log_path``."""
    return procs.start(argv, log_path, env=dict(env))


def _probe(url: str, key: str) -> tuple[bool, str]:
    """(answered 200, its non-200 answer in a few words or "" when it did not answer at all)."""
    try:
        answer = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=2.0)
    except httpx.HTTPError:
        return False, ""
    if answer.status_code == 200:
        return True, ""
    return False, f"HTTP {answer.status_code} {answer.text[:500]}"


def is_ready(url: str, key: str) -> bool:
    """True when ``GET url`` answers 200 with the key (``<base_url>/models`` or a ``/health`` URL)."""
    return _probe(url, key)[0]


def wait_ready(
    url: str, key: str, proc: subprocess.Popen, timeout_s: float, log_path: Path, *, name: str, poll_s: float = 0.25
) -> float:
    """Poll ``GET url`` until it answers 200 while ``proc`` stays alive; returns the seconds waited.

    Raises:
        ServerError: ``proc`` exited (at once, with its exit status) or ``timeout_s`` passed (with the
            server's last non-200 answer: one that says why it is not ready); both quote the last
            lines of ``log_path``. ``name`` starts the message (``sidecar answer_llm``).
    """
    t0 = time.monotonic()
    last_answer = ""
    while True:
        if proc.poll() is not None:
            raise ServerError(
                f"{name} exited with {proc.returncode} during start-up; "
                f"last lines of {log_path}:\n{procs.tail(log_path)}"
            )
        ok, answer = _probe(url, key)
        if ok:
            return time.monotonic() - t0
        if answer:
            last_answer = f"; its last health answer: {answer}"
        if time.monotonic() - t0 > timeout_s:
            raise ServerError(
                f"{name} not ready at {url} after {timeout_s:.0f} s (process alive){last_answer}; "
                f"last lines of {log_path}:\n{procs.tail(log_path)}"
            )
        time.sleep(poll_s)


def stop(proc: subprocess.Popen, grace_s: float = 30.0, *, name: str = "server") -> None:
    """Stop the server's process tree (vLLM forks engine processes): SIGTERM, SIGKILL after ``grace_s``."""
    procs.stop_tree(proc.pid, grace_s, name=name)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.warning("%s (pid %d) still running after stop", name, proc.pid)
