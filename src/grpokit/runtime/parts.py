"""What the in-job driver starts and asks, behind small seams, with the real parts as defaults.

:class:`Parts` holds them: verl's check of the point, the job's Ray cluster, the sidecar servers,
the trainer process, the :class:`Host` (Slurm's view of this task, the node's GPUs, the
process-wide steps) and the clock the stop deadline runs on. A job uses ``Parts()``; the unit
tests give the driver in-process stand-ins (``tests/doubles/driver_parts.py``) to run every
shutdown path in seconds, without Slurm, Ray or a GPU.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from grpokit import procs
from grpokit.config.point import PointSpec
from grpokit.runtime.processes import environment, ray_cluster, sidecars, signal_relay
from grpokit.runtime.processes.ports import release_ports
from grpokit.slurm import gpus, kill_wait, nodes, requeue, stop_view, task, time_left
from grpokit.validate import validate_point


class Trainer(Protocol):
    """A running trainer: ``poll()`` (exit status or None), ``wait()``, ``stop(grace_s)``, ``pid``."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def stop(self, grace_s: float) -> None: ...


class TrainerProcess:
    """The trainer as a process tree of its own (:func:`grpokit.procs.start`)."""

    def __init__(self, cmd: list[str], log_path: Path, *, env: Mapping[str, str], cwd: Path):
        self.proc: subprocess.Popen = procs.start(cmd, log_path, env=env, cwd=cwd)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self) -> int:
        return self.proc.wait()

    def stop(self, grace_s: float) -> None:
        """SIGTERM its tree, SIGKILL what is left after ``grace_s`` (no-op once it is gone)."""
        procs.stop_tree(self.proc.pid, grace_s, name="trainer")


class Host:
    """This node and Slurm's view of this task (:mod:`grpokit.slurm`, :mod:`grpokit.runtime.processes.environment`).

    Every method is what a job needs from the machine; a test subclass answers as a Slurm task
    would (time left, preemption) without Slurm.
    """

    def in_slurm(self) -> bool:
        return task.in_slurm()

    def task_id(self) -> str | None:
        return task.slurm_task_id()

    def slurm_info(self) -> dict[str, Any]:
        return task.slurm_info()

    def time_left_s(self) -> float | None:
        return time_left.time_left_s()

    def stop_view(self) -> stop_view.SlurmStopView:
        return stop_view.slurm_stop_view()

    def kill_wait_s(self) -> float | None:
        """Slurm's KillWait (s, :mod:`grpokit.slurm.kill_wait`); None outside Slurm or when unknown."""
        return kill_wait.kill_wait_s() if self.in_slurm() else None

    def node_names(self) -> list[str]:
        return nodes.node_names()

    def node_address(self, node: str) -> str:
        return nodes.node_address(node)

    def visible_gpus(self) -> list[str]:
        return gpus.visible_gpus()

    def cuda_available(self) -> bool:
        return environment.cuda_available()

    def cpus_for_ray(self, cluster_cpus: int | None) -> int:
        return environment.cpus_for_ray(cluster_cpus)

    def summary(self) -> dict[str, Any]:
        return environment.summary()

    def become_subreaper(self) -> None:
        procs.become_subreaper()

    def start_signal_relay(self, log_path: Path) -> None:
        """In a Slurm job: the step that passes ``scancel --signal=USR2`` on to this process."""
        node = task.JobEnv.from_env().nodename
        if self.in_slurm() and node:
            # scancel --signal=USR2 without --batch signals job steps only, never this batch step
            signal_relay.start(node, log_path)

    def requeue_self(self) -> bool:
        return requeue.requeue_self()

    def clean_up(self, grace_s: float) -> None:
        """Last step of a close: stop every leftover descendant of this process, release its ports."""
        procs.stop_all_children(grace_s)
        release_ports()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Parts:
    """The driver's parts (defaults: the real ones).

    validate: ``(spec) -> (verl config | None, problems)`` (:func:`grpokit.validate.validate_point`).
    start_ray: ``(**kwargs) -> cluster`` with ``address``, ``nodes``, ``head.pid``, ``alive()``,
        ``endpoints()``, ``client_env()``, ``stop(grace_s)``
        (:func:`grpokit.runtime.processes.ray_cluster.start_cluster`).
    sidecars: ``plan_sidecars``, ``client_env``, ``start``, ``wait_ready``, ``stop`` as in
        :mod:`grpokit.runtime.processes.sidecars` (the module itself by default).
    start_trainer: ``(cmd, log_path, *, env, cwd) -> Trainer`` (:class:`TrainerProcess`).
    host: :class:`Host`. clock: seconds, for the save deadline (``time.monotonic``).
    poll_s: how often the driver checks the trainer, the sidecars and Ray (s).
    """

    validate: Callable[[PointSpec], tuple[Any, list]] = validate_point
    start_ray: Callable[..., Any] = ray_cluster.start_cluster
    sidecars: ModuleType | Any = sidecars
    start_trainer: Callable[..., Trainer] = TrainerProcess
    host: Host = dataclasses.field(default_factory=Host)
    clock: Callable[[], float] = time.monotonic
    poll_s: float = 0.5
