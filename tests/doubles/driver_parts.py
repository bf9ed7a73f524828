"""TEST DOUBLES of the in-job driver's parts (:class:`grpokit.runtime.parts.Parts`), all in this process.

They stand in for what a unit test cannot start in seconds (Ray, a vLLM or memory server, verl's
trainer on a GPU, Slurm's view of a task) so that ``tests/unit/test_driver_lifecycle.py`` can
drive every way an attempt ends and check that :meth:`Driver.close` stopped each of them:

- :class:`StandInRay`: ``start_ray(**kwargs)`` -> :class:`StandInCluster`, alive until ``kill()``.
- :class:`StandInSidecars`: the sidecar API of :mod:`grpokit.runtime.processes.sidecars`; each sidecar is a
  real HTTP server on a thread of this process that answers ``/health`` to its own key, so the
  real readiness check (:func:`grpokit.runtime.processes.sidecars.wait_ready`) gates it; ``die(name)``
  makes it exit as a crashed server does.
- :class:`StandInTrainer`: verl's trainer as a thread, following the kit's contracts as
  ``tests/doubles/fake_verl_trainer.py`` does: ``Total training steps: N`` in ``trainer.log``, one
  ``{"step": N, "data": {...}}`` line per step in ``$VERL_FILE_LOGGER_PATH``, a complete checkpoint
  at ``save_freq`` and at the last step, and the save request (``control/save_request``) read at
  the start of each step: checkpoint the last completed step, ``control.mark_saved``, exit 1.
  ``script[step]`` runs at that step (send a signal, kill a sidecar, crash).
- :class:`StandInHost`: Slurm's answers for a task (in Slurm or not, time left, preempting,
  requeueing) and a record of the requeue and the clean-up.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

from grpokit.runtime import control
from grpokit.runtime.parts import Host
from grpokit.runtime.processes import ray_listen, sidecars
from grpokit.slurm.stop_view import SlurmStopView

#: Prefix of every thread a stand-in starts (the tests check none is left after the close).
_fake = importlib.util.spec_from_file_location("fake_verl_trainer_pt", Path(__file__).with_name("fake_verl_trainer.py"))
_fake_trainer = importlib.util.module_from_spec(_fake)
_fake.loader.exec_module(_fake_trainer)
#: torch.save's file format without torch (the trainer test double's writer).
write_pt = _fake_trainer.write_pt

THREAD_PREFIX = "standin-"


class StandInCluster:
    """What the driver reads of a Ray cluster."""

    def __init__(self, kwargs: dict):
        self.kwargs = kwargs
        self.address = "127.0.0.1:6379"
        self.nodes = list(kwargs["nodes"])
        self.head = SimpleNamespace(pid=os.getpid())
        self.killed = False
        self.stopped = False

    def alive(self) -> bool:
        return not (self.killed or self.stopped)

    def endpoints(self) -> dict:
        return {"address": self.address, "nodes": self.nodes}

    def client_env(self) -> dict[str, str]:
        return ray_listen.client_env(len(self.nodes) <= 1)

    def kill(self) -> None:
        """Ray's head dies (as when a node's raylet is OOM-killed)."""
        self.killed = True

    def stop(self, grace_s: float) -> None:
        self.stopped = True


class StandInRay:
    """``Parts.start_ray``: records each cluster it starts."""

    def __init__(self) -> None:
        self.clusters: list[StandInCluster] = []

    def __call__(self, **kwargs) -> StandInCluster:
        cluster = StandInCluster(kwargs)
        self.clusters.append(cluster)
        return cluster


class _ServerProcess:
    """What the driver reads of a sidecar's process: ``poll()``, ``returncode``, ``pid``."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.pid = os.getpid()

    def poll(self) -> int | None:
        return self.returncode


def _health_handler(key: str) -> type[BaseHTTPRequestHandler]:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            ok = self.path == "/health" and self.headers.get("Authorization") == f"Bearer {key}"
            self.send_response(200 if ok else 401)
            self.end_headers()
            self.wfile.write(b"ok" if ok else b"unauthorized")

        def log_message(self, *args) -> None:
            pass

    return Health


class StandInSidecars:
    """``Parts.sidecars``: in-process HTTP servers in place of the sidecar processes."""

    def __init__(self) -> None:
        self.servers: dict[str, tuple[ThreadingHTTPServer, threading.Thread]] = {}
        self.started: dict[str, sidecars.Sidecar] = {}
        self.stopped: list[str] = []

    def plan_sidecars(self, specs: dict, *, host: str, log_dir: Path) -> dict[str, sidecars.Sidecar]:
        return {
            name: sidecars.Sidecar(
                name=name,
                spec=spec,
                host="127.0.0.1",
                port=0,
                key=secrets.token_urlsafe(16),
                log_path=Path(log_dir) / f"{name}.log",
            )
            for name, spec in specs.items()
        }

    client_env = staticmethod(sidecars.client_env)

    def start(self, sc: sidecars.Sidecar, others: dict, *, env: dict, cuda_devices: str | None) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _health_handler(sc.key))
        sc.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, name=f"{THREAD_PREFIX}sidecar-{sc.name}", daemon=True)
        thread.start()
        sc.proc = _ServerProcess()
        sc.log_path.parent.mkdir(parents=True, exist_ok=True)
        sc.log_path.write_text(f"stand-in {sc.name} serving on {sc.url}\n")
        self.servers[sc.name] = (server, thread)
        self.started[sc.name] = sc

    def wait_ready(self, sc: sidecars.Sidecar) -> float:
        return sidecars.wait_ready(sc, timeout_s=10)

    def _shut(self, name: str) -> None:
        server, thread = self.servers[name]
        if thread.is_alive():
            server.shutdown()
            server.server_close()
            thread.join(5)

    def die(self, name: str) -> None:
        """Sidecar ``name`` crashes: it stops answering and its process reports exit 1."""
        sc = self.started[name]
        self._shut(name)
        with open(sc.log_path, "a") as f:
            f.write("RuntimeError: stand-in server crashed\n")
        sc.proc.returncode = 1

    def stop(self, planned: dict[str, sidecars.Sidecar], grace_s: float) -> None:
        for name, sc in planned.items():
            if name in self.servers:
                self._shut(name)
                if sc.proc.returncode is None:
                    sc.proc.returncode = -15
            self.stopped.append(name)

    def running(self) -> list[str]:
        return [name for name, (_, thread) in self.servers.items() if thread.is_alive()]


class Crash(RuntimeError):
    """Raised by a script step: the stand-in trainer dies with a traceback in its log (exit 3)."""


def _overrides(cmd: list[str]) -> dict[str, str]:
    pairs = (arg.partition("=") for arg in cmd if "=" in arg)
    return {key.lstrip("+"): value for key, _, value in pairs}


class StandInTrainer:
    """``Parts.start_trainer``: verl's trainer as a thread (see the module docstring).

    ``script``: ``{step: callable(trainer)}`` run at the start of that step, after the save-request
    check; a callable raising :class:`Crash` ends the trainer with exit 3. ``ignore_save``: never
    act on the save request (a trainer stuck in a step). ``step_s``: seconds per step.
    """

    def __init__(
        self,
        cmd: list[str],
        log_path: Path,
        *,
        env: dict[str, str],
        cwd: Path,
        script: dict[int, Callable[[StandInTrainer], None]] | None = None,
        ignore_save: bool = False,
        step_s: float = 0.1,
    ):
        cfg = _overrides(cmd)
        self.env = dict(env)
        self.total = int(cfg["trainer.total_training_steps"])
        self.save_freq = int(cfg.get("trainer.save_freq", "-1"))
        self.ckpt = Path(cfg["trainer.default_local_dir"])
        self.ctl = Path(env[control.ENV])
        self.metrics = Path(env["VERL_FILE_LOGGER_PATH"])
        self.log_path = Path(log_path)
        self.script = script or {}
        self.ignore_save = ignore_save
        self.step_s = step_s
        self.pid = os.getpid()
        self.returncode: int | None = None
        self.stop_calls = 0
        self.stop_graces: list[float] = []  # the grace (s) of each stop
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}trainer", daemon=True)
        self.thread.start()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self) -> int:
        self.thread.join()
        return self.returncode

    def stop(self, grace_s: float) -> None:
        """SIGTERM's default action: the trainer dies at once (-15), where it is."""
        self.stop_calls += 1
        self.stop_graces.append(grace_s)
        self._stop.set()
        self.thread.join(grace_s)

    def save(self, step: int) -> None:
        """A complete verl checkpoint of ``step`` (grpokit.runtime.decisions.checkpoints' layout), tracker last."""
        actor = self.ckpt / f"global_step_{step}" / "actor"
        (actor / "huggingface").mkdir(parents=True, exist_ok=True)
        for kind in ("model", "optim", "extra_state"):
            write_pt(actor / f"{kind}_world_size_1_rank_0.pt", {"standin": kind})
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
        (actor / "huggingface" / "config.json").write_text("{}")
        write_pt(actor.parent / "data.pt", {"step": step})
        (self.ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))

    def _run(self) -> None:
        self.metrics.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log, open(self.metrics, "w") as metrics:
            log.write(f"Total training steps: {self.total}\n")
            log.flush()
            for step in range(1, self.total + 1):
                if self._stop.wait(self.step_s):
                    self.returncode = -15
                    return
                if not self.ignore_save and control.save_requested(self.ctl) is not None:
                    if step > 1:
                        self.save(step - 1)
                        control.mark_saved(self.ctl, step - 1, str(self.ckpt))
                    log.write(f"save request: checkpointed step {step - 1}, stopping\n")
                    self.returncode = 1
                    return
                try:
                    if step in self.script:
                        self.script[step](self)
                except Crash as exc:
                    log.write(f'Traceback (most recent call last):\n  File "main_ppo.py", line 1\n{exc!r}\n')
                    log.write(f"RuntimeError: {exc}\n")
                    self.returncode = 3
                    return
                metrics.write(json.dumps({"step": step, "data": {"critic/score/mean": 0.1 * step}}) + "\n")
                metrics.flush()
                log.write(f"step:{step}\n")
                log.flush()
                if self.save_freq > 0 and (step % self.save_freq == 0 or step == self.total):
                    self.save(step)
        self.returncode = 0


class StandInHost(Host):
    """Slurm's answers for one task, as given; records what the driver asked of the host."""

    def __init__(
        self,
        *,
        in_slurm: bool = False,
        time_left_s: float | None = None,
        view: SlurmStopView | None = None,
    ):
        self._in_slurm = in_slurm
        self._time_left_s = time_left_s
        self._view = view or SlurmStopView(None, None)
        self.kill_wait: float | None = None
        self.requeues = 0
        self.clean_ups = 0
        self.relays = 0

    def in_slurm(self) -> bool:
        return self._in_slurm

    def task_id(self) -> str | None:
        return "77_1" if self._in_slurm else None

    def slurm_info(self) -> dict:
        return {"job_id": "78", "array_job_id": "77", "array_task_id": 1} if self._in_slurm else {}

    def time_left_s(self) -> float | None:
        return self._time_left_s

    def stop_view(self) -> SlurmStopView:
        return self._view

    def kill_wait_s(self) -> float | None:
        return self.kill_wait  # Slurm's KillWait as given (None: unknown), never scontrol here

    def node_names(self) -> list[str]:
        return ["standin-node"]

    def node_address(self, node: str) -> str:
        return "127.0.0.1"

    def visible_gpus(self) -> list[str]:
        return []

    def cuda_available(self) -> bool:
        return True  # the trainer is a stand-in: it trains without a GPU

    def cpus_for_ray(self, cluster_cpus: int | None) -> int:
        return 2

    def summary(self) -> dict:
        return {"host": "standin-node"}

    def become_subreaper(self) -> None:
        pass

    def start_signal_relay(self, log_path: Path) -> None:
        self.relays += 1

    def requeue_self(self) -> bool:
        self.requeues += 1
        return True

    def clean_up(self, grace_s: float) -> None:
        self.clean_ups += 1


class FakeClock:
    """A clock that moves ``tick_s`` on every reading (the save deadline passes in a few polls)."""

    def __init__(self, tick_s: float):
        self.now = time.monotonic()
        self.tick_s = tick_s

    def __call__(self) -> float:
        self.now += self.tick_s
        return self.now
