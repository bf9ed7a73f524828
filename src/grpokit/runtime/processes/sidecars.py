"""The job's sidecar servers (the vLLM answer server, a task's servers, ...): start, gate, watch, stop.

``kind: vllm`` is the kit's own (:mod:`grpokit.serving.vllm`); any other kind is one a task brings
(its command line, key variable and peers' keys: :class:`grpokit.config.task_registry.SidecarKind`),
so this module names no task.

Each sidecar is declared in the experiment config under ``sidecars.<name>`` and gets its own
port(s), its own API key (passed in the environment, never on the command line or in a log), its
own log file, and the GPUs the job's GPU plan gives it. Readiness is an HTTP health check polled
until a deadline, and the process must stay alive meanwhile: a slow server is waited for, a dead
one fails the job at once with the last lines of its log, also while Ray is still starting
(:func:`check_alive`).
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from grpokit import procs
from grpokit.config.schema import SidecarConf
from grpokit.config.task_registry import SidecarKind, sidecar_kinds
from grpokit.runtime.decisions.start_errors import SidecarError
from grpokit.runtime.processes import ports
from grpokit.serving import vllm

log = logging.getLogger(__name__)

#: Environment variable carrying a ``vllm`` sidecar's client key (vLLM reads VLLM_API_KEY itself).
VLLM_KEY_ENV = vllm.API_KEY_ENV
#: ... of a sidecar whose kind names none (a ``command`` stand-in).
OTHER_KEY_ENV = "GRPOKIT_SIDECAR_KEY"


def _task_kind(kind: str | None) -> SidecarKind | None:
    return sidecar_kinds().get(kind) if kind and kind != "vllm" else None


def key_env(kind: str | None) -> str | None:
    """The variable carrying a sidecar's client key: vLLM's, the task kind's, else None."""
    if kind == "vllm":
        return VLLM_KEY_ENV
    task_kind = _task_kind(kind)
    return task_kind.key_env if task_kind else None


@dataclasses.dataclass
class Sidecar:
    """One running sidecar."""

    name: str
    spec: SidecarConf
    host: str
    port: int
    key: str
    log_path: Path
    proc: subprocess.Popen | None = None
    internal_port_base: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def endpoint(self) -> dict[str, Any]:
        return {
            "kind": self.spec.kind,
            "url": self.url,
            "port": self.port,
            "internal_port_base": self.internal_port_base,
            "pid": self.proc.pid if self.proc else None,
            "log": str(self.log_path),
        }

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def build_command(sc: Sidecar, others: dict[str, Sidecar]) -> list[str]:
    """The sidecar's command line: ``spec.command`` (a template, for stand-ins) or the kind's own.

    ``spec.command`` is a list whose parts may hold ``{python}``, ``{host}`` and ``{port}`` (Python's
    ``str.format``); a first word ``python`` means this interpreter. The key is never a field: it
    travels in the environment only.
    """
    if sc.spec.command:
        fields = {"python": sys.executable, "host": sc.host, "port": sc.port}
        cmd = [str(part).format(**fields) for part in sc.spec.command]
        if cmd[0] == "python":  # as for runtime.trainer_cmd: the job's own interpreter, not PATH's
            cmd[0] = sys.executable
        return cmd
    kind = sc.spec.kind
    if kind == "vllm":
        return vllm.VllmServe.from_sidecar(sc.spec, host=sc.host, port=sc.port).command()
    task_kind = _task_kind(kind)
    if task_kind is not None:
        return task_kind.command(sc, others)
    known = ", ".join(["vllm", *sidecar_kinds()])
    raise SidecarError(f"sidecar {sc.name}: unknown kind {kind!r} ({known}, or give a command)")


def plan_sidecars(specs: dict[str, SidecarConf], *, host: str, log_dir: Path) -> dict[str, Sidecar]:
    """Reserve each sidecar's port(s) and make its key; nothing is started yet."""
    out = {}
    for name, spec in specs.items():
        # vLLM opens internal ports from VLLM_PORT upwards: a block of its own keeps jobs apart.
        is_vllm = spec.kind == "vllm"
        reserved = ports.reserve_ports(1, contiguous=16 if is_vllm else 0, host=host)
        port, internal = reserved[0], (reserved[1] if is_vllm else None)
        out[name] = Sidecar(
            name=name,
            spec=spec,
            host=host,
            port=port,
            key=vllm.new_key(),
            log_path=log_dir / f"{name}.log",
            internal_port_base=internal,
        )
    return out


def client_env(sidecars: dict[str, Sidecar]) -> dict[str, str]:
    """Keys the trainer's reward workers need to call the sidecars (exported before Ray starts)."""
    return {key_env(s.spec.kind): s.key for s in sidecars.values() if key_env(s.spec.kind)}


def start(sc: Sidecar, others: dict[str, Sidecar], *, env: dict[str, str], cuda_devices: str | None) -> None:
    """Start one sidecar (not waiting for it); its key goes in its environment."""
    kind = sc.spec.kind
    env = vllm.server_env(
        env,
        sc.key,
        key_env=key_env(kind) or OTHER_KEY_ENV,
        cuda_devices=cuda_devices,
        internal_port_base=sc.internal_port_base,
    )
    task_kind = _task_kind(kind)
    if task_kind is not None:  # the peers' keys it calls with (the memory server's answer server's)
        env.update({variable: others[peer].key for variable, peer in task_kind.peer_keys(sc.spec).items()})
    cmd = build_command(sc, others)
    log.info("sidecar %s: %s", sc.name, " ".join(cmd))
    sc.proc = vllm.start(cmd, sc.log_path, env)


def wait_ready(sc: Sidecar, timeout_s: float | None = None) -> float:
    """Block until the sidecar answers its health check (``spec.health_path``, default ``/health``);
    returns the seconds waited (:func:`grpokit.serving.vllm.wait_ready`).

    Raises:
        SidecarError: the process exited (at once, with its log's tail) or the deadline passed.
    """
    if sc.proc is None:
        raise SidecarError(f"sidecar {sc.name} was not started")
    timeout_s = float(timeout_s or sc.spec.start_timeout_s)
    url = sc.url + sc.spec.health_path
    try:
        return vllm.wait_ready(url, sc.key, sc.proc, timeout_s, sc.log_path, name=f"sidecar {sc.name}")
    except vllm.ServerError as exc:
        raise SidecarError(str(exc)) from None


def check_alive(sidecars: dict[str, Sidecar]) -> None:
    """Raise when a started sidecar has exited: the driver calls it while Ray starts, so that a
    server that dies at once fails the attempt at once, not after Ray's start-up wait.

    Raises:
        SidecarError: ``sidecar <name> exited with <code> during start-up, while Ray was starting``,
            then its log's tail.
    """
    for sc in sidecars.values():
        if sc.proc is not None and sc.proc.poll() is not None:
            raise SidecarError(
                f"sidecar {sc.name} exited with {sc.proc.returncode} during start-up, while Ray was starting; "
                f"last lines of {sc.log_path}:\n{procs.tail(sc.log_path)}"
            )


def stop(sidecars: dict[str, Sidecar], grace_s: float) -> None:
    """Stop every sidecar's process tree (SIGTERM, then SIGKILL after ``grace_s``), the last started first."""
    for sc in reversed(list(sidecars.values())):
        if sc.proc is not None:
            vllm.stop(sc.proc, grace_s, name=f"sidecar {sc.name}")
