"""The job's own Ray cluster: one head on the job's first node, one worker per other node.

Failure modes this avoids (docs/field-failures.md): two heads on one node fighting over fixed ports
(ray#10154, ports come from :mod:`grpokit.runtime.processes.ports`); ``ray stop`` killing another job's Ray
(ray#43449, only this job's process trees are stopped); joining a stale cluster found in
``/tmp/ray`` (the address is pinned with ``RAY_ADDRESS``); every host name in the head variable
(verl#548, the head is the first host of ``scontrol show hostnames``); Ray guessing CPUs inside a
cgroup (verl#523, CPUs and GPUs are given explicitly); AF_UNIX paths over 107 bytes under a long
TMPDIR (verl#1120, the temp dir is a short path of its own); fixed sleeps (readiness is polled
until every node and its GPUs are registered, with a deadline).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from grpokit import procs
from grpokit.runtime.decisions.start_errors import RayStartError, RayStartInterrupted
from grpokit.runtime.processes import node_state, ports, ray_cli, ray_listen, ray_temp
from grpokit.slurm.nodes import srun_step
from grpokit.slurm.task import JobEnv

log = logging.getLogger(__name__)

#: Ray worker processes each take one port of this block; its size comes from the node's CPUs
#: (:func:`grpokit.runtime.processes.ray_resources.worker_port_count`), this is the default.
WORKER_PORT_BLOCK = 200
_PORT_NAMES = (
    "gcs",
    "node_manager",
    "object_manager",
    "client_server",
    "metrics_export",
    "dashboard_agent_listen",
    "dashboard_agent_grpc",
    "runtime_env_agent",
    "dashboard",
    "dashboard_metrics",
)


def short_temp_dir() -> Path:
    """Ray's ``--temp-dir`` for a new start, in a folder only this user can enter
    (:func:`grpokit.runtime.processes.ray_temp.new_temp_dir`; earlier ended starts' folders removed).

    Raises:
        RayStartError: no writable short temp dir.
    """
    try:
        return ray_temp.new_temp_dir()
    except ray_temp.NoTempDirError as exc:
        raise RayStartError(str(exc)) from None


def port_args(p: dict[str, int], worker_block_start: int, worker_ports: int = WORKER_PORT_BLOCK) -> list[str]:
    """``ray start`` flags for every port Ray opens on a node (``worker_ports`` ports for workers)."""
    args = [
        f"--node-manager-port={p['node_manager']}",
        f"--object-manager-port={p['object_manager']}",
        f"--metrics-export-port={p['metrics_export']}",
        f"--dashboard-agent-listen-port={p['dashboard_agent_listen']}",
        f"--dashboard-agent-grpc-port={p['dashboard_agent_grpc']}",
        f"--runtime-env-agent-port={p['runtime_env_agent']}",
        f"--min-worker-port={worker_block_start}",
        f"--max-worker-port={worker_block_start + worker_ports - 1}",
    ]
    return args


#: Ray's metrics switch and environment (kept here for callers): :mod:`grpokit.runtime.processes.ray_listen`.
METRICS_SWITCH = ray_listen.METRICS_SWITCH
metrics_env = ray_listen.metrics_env


def reserve_node_ports(host: str, worker_ports: int = WORKER_PORT_BLOCK) -> tuple[dict[str, int], int]:
    """Ports for one Ray node (names of :data:`_PORT_NAMES`) and its worker port block's start."""
    *singles, block = ports.reserve_ports(len(_PORT_NAMES), contiguous=worker_ports, host=host)
    return dict(zip(_PORT_NAMES, singles, strict=True)), block


def auth_env(secret_dir: Path) -> dict[str, str]:
    """Ray token authentication: a per-job token in a file only the job's user can read."""
    secret_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret_dir.chmod(0o700)  # also when it already existed with wider rights
    token_path = secret_dir / "ray_token"
    if not token_path.exists():
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


@dataclasses.dataclass
class RayCluster:
    """A running Ray cluster of this job."""

    address: str
    host: str
    temp_dir: Path
    ports: dict[str, int]
    worker_port_block: int
    head: subprocess.Popen
    workers: list[subprocess.Popen]
    nodes: list[str]
    worker_ports: int = WORKER_PORT_BLOCK
    object_store_bytes: int | None = None

    def endpoints(self) -> dict:
        return {
            "address": self.address,
            "host": self.host,
            "ports": self.ports,
            "worker_ports": [self.worker_port_block, self.worker_port_block + self.worker_ports - 1],
            "object_store_bytes": self.object_store_bytes,
            "temp_dir": str(self.temp_dir),
            "nodes": self.nodes,
            # what a process joining this Ray needs besides RAY_ADDRESS and the token (ray_listen)
            "client_env": self.client_env(),
        }

    def client_env(self) -> dict[str, str]:
        """What a process that joins this Ray (verl's trainer) needs in its environment besides
        ``RAY_ADDRESS`` and the token: :func:`grpokit.runtime.processes.ray_listen.client_env`."""
        return ray_listen.client_env(len(self.nodes) <= 1)

    def alive(self) -> bool:
        return self.head.poll() is None and all(w.poll() is None for w in self.workers)

    def stop(self, grace_s: float) -> None:
        """Stop this cluster's processes only (never ``ray stop``, which is node-wide).

        The workers first, by SIGUSR1 to their ``srun``, which passes it on to
        :mod:`grpokit.runtime.processes.ray_worker` (on SIGTERM ``srun`` SIGKILLs its step at once, and the
        worker could not stop Ray and remove its temp dir); whatever is left after ``grace_s`` is
        stopped like the head: SIGTERM, then SIGKILL.
        """
        for proc in self.workers:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + grace_s
        for proc in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in [*self.workers, self.head]:
            procs.stop_tree(proc.pid, grace_s, name="ray")
        ray_temp.remove(self.temp_dir)


#: Ray's own start-up wait for its raylet is a fixed 30 s (ray/_private/node.py); on an overloaded
#: node (many jobs starting at once on few cores) it gives up. Such a start is tried this often.
START_ATTEMPTS = 3
#: Any other failed start (a port taken between its reservation and Ray's bind, the deadline
#: passed, a process that exited) is tried this often, each try with fresh ports.
OTHER_START_ATTEMPTS = 2
_OVERLOAD = "timed out during startup"
#: A new try waits a random 0..RETRY_SPREAD_S x (tries so far) seconds first.
RETRY_SPREAD_S = 10.0


def start_cluster(**kwargs) -> RayCluster:
    """:func:`start_cluster_once`, tried again when it failed: an environment failure on a loaded node.

    Each failed try has its processes stopped and its temp dir removed (by
    :func:`start_cluster_once`); the next gets fresh ports (the failed try's stay reserved until the
    job ends, so that a port some stray process holds is not chosen again) and a fresh temp dir.
    Ray's own start-up time-out on an overloaded node is tried :data:`START_ATTEMPTS` times, any
    other failure :data:`OTHER_START_ATTEMPTS` times, after a random pause (:data:`RETRY_SPREAD_S`);
    each try is logged (the job's ``driver.log``).
    A stop signal, or ``abort`` raising, ends the start at once without a new try.
    ``on_wait`` (popped from the keyword arguments) is :func:`start_slot`'s: told what the start waits for.

    Raises:
        RayStartError: the last try's error (its first line: ``Ray head did not start on <node>
            ...``), or the user's node state folder is not private (not tried again: the same node);
            :class:`RayStartInterrupted` when the job is stopping.
    """
    stop_requested = kwargs.get("stop_requested")
    on_wait = kwargs.pop("on_wait", None)
    try:
        start_lock_path()  # the user's node state folder: a node problem when it is not private
    except node_state.NodeStateError as exc:
        raise RayStartError(f"Ray head did not start on {(kwargs.get('nodes') or ['this node'])[0]}: {exc}") from None
    attempt = 0
    while True:
        attempt += 1
        try:
            with start_slot(float(kwargs["timeout_s"]), stop_requested, on_wait):
                return start_cluster_once(**kwargs)
        except RayStartInterrupted:
            raise
        except RayStartError as exc:
            tries = START_ATTEMPTS if _OVERLOAD in str(exc) else OTHER_START_ATTEMPTS
            if attempt >= tries:
                raise
            if stop_requested is not None and stop_requested():
                raise RayStartInterrupted("the job is stopping: Ray's start is not tried again") from exc
            # Jobs that failed together (one overloaded node) would all try again together: a
            # random pause spreads their next starts out.
            pause = random.uniform(0, RETRY_SPREAD_S * attempt)
            log.warning(
                "ray start failed (try %d of %d): %s; its processes were stopped, trying again with fresh ports "
                "in %.0f s",
                attempt,
                tries,
                str(exc).splitlines()[0],
                pause,
            )
            deadline = time.monotonic() + pause
            while time.monotonic() < deadline:
                if stop_requested is not None and stop_requested():
                    raise RayStartInterrupted("the job is stopping: Ray's start is not tried again") from exc
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


#: The start lock file when set (``GRPOKIT_RAY_START_LOCK``, tests); else ``ray-start.lock`` in this
#: user's private node state folder (:mod:`grpokit.runtime.processes.node_state`).
START_LOCK: Path | None = (
    Path(os.environ["GRPOKIT_RAY_START_LOCK"]) if os.environ.get("GRPOKIT_RAY_START_LOCK") else None
)


def start_lock_path() -> Path:
    """This user's Ray start lock on this node (:data:`START_LOCK` when set).

    Raises:
        node_state.NodeStateError: the user's node state folder is not private.
    """
    return START_LOCK if START_LOCK is not None else node_state.state_dir() / "ray-start.lock"


def _holder(fd: int) -> str:
    """Who holds the slot, from what the holder wrote into the lock file (``job <id>, pid <pid>``)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"job {info['job']}, pid {info['pid']}" if info.get("job") else f"pid {info['pid']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another job"


@contextlib.contextmanager
def start_slot(
    max_wait_s: float,
    stop_requested: Callable[[], bool] | None = None,
    on_wait: Callable[[str | None], None] | None = None,
):
    """Hold this node's Ray-start slot of this user's jobs while a head starts (until it is ready or failed).

    Heads that start together on one node share its cores and all miss Ray's own fixed 30 s
    start-up wait (measured: four at once at load 27 on 2 cores, every try failed); one after the
    other each gets the node. The slot is waited for at most ``max_wait_s`` (then the start goes
    ahead anyway: a stuck holder never blocks a job); the lock lapses with its holder's process.
    The lock is the user's own (:func:`start_lock_path`): another user's jobs never hold it.
    The holder writes its Slurm job and pid into it, so that a waiting job can say whom it waits for.

    Args:
        max_wait_s: the longest wait for the slot.
        stop_requested: polled while waiting.
        on_wait: called with one line (``waiting for this node's Ray start slot: job 12_3, pid 456
            starts its Ray; at most 180 s``) when the wait begins, and with None when it ends (the
            driver shows it as the point's reason in ``status.json``).

    Raises:
        RayStartInterrupted: ``stop_requested()`` turned true while waiting.
        node_state.NodeStateError: the user's node state folder is not private.
    """
    try:
        fd = node_state.private_file(start_lock_path())
    except OSError as exc:
        log.warning("no Ray start slot (%s): starting without waiting for other starts", exc)
        yield
        return
    t0, said, held = time.monotonic(), False, False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                pass
            if stop_requested is not None and stop_requested():
                raise RayStartInterrupted("the job is stopping: Ray's start was given up")
            if time.monotonic() - t0 > max_wait_s:
                log.warning("another Ray start on this node held the start slot %.0f s: starting anyway", max_wait_s)
                break
            if not said:
                holder = _holder(fd)
                why = f"waiting for this node's Ray start slot: {holder} starts its Ray; at most {max_wait_s:.0f} s"
                log.info("another Ray start is under way on this node (%s): waiting for it", holder)
                if on_wait is not None:
                    on_wait(why)
                said = True
            time.sleep(0.5)
        if held:
            os.ftruncate(fd, 0)
            job_id = JobEnv.from_env().task_id
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "job": job_id}).encode(), 0)
        if said:
            if held:
                log.info("start slot free after %.0f s", time.monotonic() - t0)
            if on_wait is not None:
                on_wait(None)
        yield
    finally:
        os.close(fd)  # releases the lock when held


def start_cluster_once(
    *,
    log_dir: Path,
    env: dict[str, str],
    num_cpus: int,
    num_gpus: int,
    nodes: list[str],
    multi_node_host: str | None,
    timeout_s: float,
    stop_requested: Callable[[], bool] | None = None,
    abort: Callable[[], None] | None = None,
    object_store_bytes: int | None = None,
    worker_ports: int = WORKER_PORT_BLOCK,
) -> RayCluster:
    """Start the head here (and a worker on each other node of ``nodes``) and wait until ready.

    Args:
        log_dir: where ``ray_head.log`` and ``ray_worker_<node>.log`` go.
        env: the job's environment (Ray workers inherit it from the ``ray start`` process).
        num_cpus, num_gpus: resources of each node given to Ray (never guessed by Ray).
        nodes: the allocation's host names, this node first; one node binds Ray to loopback.
        multi_node_host: this node's address that the other nodes reach (several nodes only).
        timeout_s: deadline for every node and its GPUs to register.
        object_store_bytes: ``--object-store-memory`` of every node (None: Ray's own default),
            sized from the job's memory by :mod:`grpokit.runtime.processes.ray_resources`.
        worker_ports: size of each node's worker port range.
        stop_requested: polled while waiting; when it turns true the start is given up
            (:class:`RayStartInterrupted`), since the job is stopping anyway.
        abort: called while waiting; what it raises ends the start (the cluster is stopped
            first): the driver's check that its sidecars are still alive.

    Raises:
        RayStartError: a Ray process exited or the deadline passed; the first line names the
            component and node (``Ray head did not start on <node> within <s> s: <first error>``),
            the log tail follows.
    """
    one_node = len(nodes) <= 1
    host = "127.0.0.1" if one_node else (multi_node_host or "127.0.0.1")
    temp_dir = short_temp_dir()
    try:
        node_ports, block = reserve_node_ports(host, worker_ports)
    except RuntimeError as exc:  # the node's ports are taken (many jobs): a node problem, like a failed start
        ray_temp.remove(temp_dir)
        raise RayStartError(f"Ray head did not start on {nodes[0] if nodes else host}: {exc}") from None
    store_args = [f"--object-store-memory={object_store_bytes}"] if object_store_bytes else []
    address = f"{host}:{node_ports['gcs']}"
    # where Ray listens (loopback for one node, no autoscaler or agent metrics): ray_listen's docstring
    env = ray_listen.node_env(env, one_node=one_node, dashboard_metrics_port=node_ports["dashboard_metrics"])
    head_cmd = [
        *ray_cli.argv_prefix(),
        "start",
        "--head",
        "--block",
        f"--node-ip-address={host}",
        f"--port={node_ports['gcs']}",
        f"--ray-client-server-port={node_ports['client_server']}",
        "--include-dashboard=false",
        f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
        ray_listen.NO_MONITOR,
        *store_args,
        *port_args(node_ports, block, worker_ports),
    ]
    log.info("ray head: %s", " ".join(head_cmd))
    head = procs.start(head_cmd, log_dir / "ray_head.log", env=env)
    ray_temp.add_pid(temp_dir, head.pid)
    cluster = RayCluster(
        address=address,
        host=host,
        temp_dir=temp_dir,
        ports=node_ports,
        worker_port_block=block,
        head=head,
        workers=[],
        nodes=list(nodes),
        worker_ports=worker_ports,
        object_store_bytes=object_store_bytes,
    )
    # A worker's `ray start` waits for the head's node in GCS only RAY_NUM_REDIS_GET_RETRIES x 2 s
    # (40 s); on a busy node the head's raylet takes longer to register (measured 23-29 s for the
    # head alone at load 26 on 2 cores) and the worker gives up: wait as long as the kit waits.
    worker_env = {"RAY_NUM_REDIS_GET_RETRIES": str(max(20, int(timeout_s / 2))), **env}
    try:
        for node in nodes[1:]:
            worker_cmd = srun_step(
                [node],
                "grpokit.runtime.processes.ray_worker",
                f"--address={address}",
                f"--num-cpus={num_cpus}",
                f"--num-gpus={num_gpus}",
                f"--worker-ports={worker_ports}",
                *store_args,
                extra=(f"--gres=gpu:{num_gpus}",) if num_gpus else (),
            )
            log.info("ray worker on %s: %s", node, " ".join(worker_cmd))
            cluster.workers.append(procs.start(worker_cmd, log_dir / f"ray_worker_{node}.log", env=worker_env))
        wait_ready(
            cluster,
            env=env,
            num_gpus=num_gpus,
            timeout_s=timeout_s,
            log_dir=log_dir,
            stop_requested=stop_requested,
            abort=abort,
        )
    except BaseException:
        cluster.stop(grace_s=5)
        raise
    return cluster


#: The probe gets this long past ``timeout_s`` (its own deadline; ``import ray`` and a last
#: ``ray.init`` may overrun it) before it is killed.
PROBE_GRACE_S = 30


def wait_ready(
    cluster: RayCluster,
    *,
    env: dict[str, str],
    num_gpus: int,
    timeout_s: float,
    log_dir: Path,
    stop_requested: Callable[[], bool] | None = None,
    abort: Callable[[], None] | None = None,
) -> dict:
    """Poll (in a probe process) until every node is alive and its GPUs are registered.

    Raises:
        RayStartError: a Ray process exited or the probe gave up (:func:`start_failure`).
        RayStartInterrupted: ``stop_requested()`` turned true (the job got a stop signal).
        whatever ``abort()`` raises (called every 0.5 s while waiting).
    """
    t0 = time.monotonic()
    probe = [
        sys.executable,
        "-m",
        "grpokit.runtime.processes.ray_probe",
        f"--address={cluster.address}",
        f"--nodes={len(cluster.nodes)}",
        f"--gpus-per-node={num_gpus}",
        f"--timeout={timeout_s}",
    ]
    proc = subprocess.Popen(
        probe, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=procs.ignore_usr2
    )
    while True:
        try:
            out, err = proc.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if stop_requested is not None and stop_requested():
                proc.kill()
                proc.communicate()
                raise RayStartInterrupted("the job is stopping: Ray's start was given up") from None
            if abort is not None:
                try:
                    abort()
                except BaseException:
                    proc.kill()
                    proc.communicate()
                    raise
            if time.monotonic() > t0 + timeout_s + PROBE_GRACE_S:  # the probe hangs in ray.init past its deadline
                proc.kill()
                proc.communicate()
                raise start_failure(
                    cluster.nodes, 0, log_dir, f"within {timeout_s:g} s", "the probe's ray.init did not return"
                ) from None
            dead = [p for p in [cluster.head, *cluster.workers] if p.poll() is not None]
            if dead:
                proc.kill()
                proc.communicate()
                index = [cluster.head, *cluster.workers].index(dead[0])
                raise start_failure(
                    cluster.nodes,
                    index,
                    log_dir,
                    f"(it exited with {dead[0].returncode} after {time.monotonic() - t0:.0f} s)",
                ) from None
    if proc.returncode != 0:
        lines = err.strip().splitlines()
        last = lines[-1] if lines else "the probe gave up"
        # "1/2 nodes alive": the head registered, a worker did not (the probe's own words)
        worker_missing = len(cluster.nodes) > 1 and re.match(r"[1-9]\d*/\d+ nodes alive", last)
        raise start_failure(cluster.nodes, 1 if worker_missing else 0, log_dir, f"within {timeout_s:g} s", last)
    summary = json.loads(out.strip().splitlines()[-1])
    log.info("ray ready: %s", summary)
    return summary


def start_failure(nodes: list[str], index: int, log_dir: Path, what: str, fallback: str = "") -> RayStartError:
    """The error of a failed start of node ``index`` of ``nodes`` (0: the head, else a worker).

    Its first line: ``Ray head did not start on <node> <what>: <first real error>``, the first
    error being the exception line of the first traceback in the node's log
    (:mod:`grpokit.runtime.decisions.first_error`), else ``fallback``, else the log's last line; then the
    last lines of that log (kept in the message: :func:`start_cluster` reads Ray's own overload
    time-out there).
    """
    from grpokit.runtime.decisions.first_error import first_error_in_file

    node = nodes[index] if index < len(nodes) else "?"
    which = "head" if index == 0 else "worker"
    log_file = log_dir / ("ray_head.log" if index == 0 else f"ray_worker_{node}.log")
    tail = procs.tail(log_file)
    tail_lines = [x for x in tail.splitlines() if x.strip()]
    first = first_error_in_file(log_file) or fallback or (tail_lines[-1] if tail_lines else "no output")
    return RayStartError(f"Ray {which} did not start on {node} {what}: {first}\nlast lines of {log_file}:\n{tail}")
