"""A real one-node Ray head started the way the kit starts it (issue 36 item 4, shared nodes).

Every socket any of its processes listens on is on loopback (measured before: the GCS, raylet, object
manager and workers on ``::``, the autoscaler's and the dashboard's Prometheus servers on ``0.0.0.0``
without authentication, the agents on the host's address); a process that joins with the cluster's
``client_env`` (as verl's trainer does) runs a task; Ray's temp dir and its ``session_*`` folder,
which Ray makes mode 777, are out of another uid's reach.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time

import psutil
import pytest

from grpokit.runtime.processes import ray_cluster, ray_temp

OTHER_UID = 12345


def _listeners(head_pid: int) -> list[tuple[str, int, str]]:
    tree = {head_pid: psutil.Process(head_pid)}
    tree |= {p.pid: p for p in tree[head_pid].children(recursive=True)}
    out = []
    for conn in psutil.net_connections("inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in tree:
            try:
                name = tree[conn.pid].name()
            except psutil.Error:
                name = "?"
            out.append((conn.laddr.ip, conn.laddr.port, name))
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def _can_write_as_other_user(folder) -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            (folder / "planted").write_text("x")
            os._exit(0)
        except PermissionError:
            os._exit(13)
        except BaseException:
            os._exit(1)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert code in (0, 13), f"the other-uid child failed for another reason (exit {code})"
    return code == 0


@pytest.mark.timeout(300)
def test_a_one_node_head_listens_on_loopback_only_and_keeps_its_temp_dir_private(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_cluster, "START_LOCK", tmp_path / "ray-start.lock")  # its own start slot
    env = {**os.environ, **ray_cluster.auth_env(tmp_path / "secrets")}
    cluster = ray_cluster.start_cluster(
        log_dir=tmp_path,
        env=env,
        num_cpus=1,
        num_gpus=0,
        nodes=["thisnode"],
        multi_node_host=None,
        timeout_s=120,
        worker_ports=20,
    )
    try:
        # the trainer's way in: RAY_ADDRESS, the token and the cluster's client_env
        joiner = {**env, "RAY_ADDRESS": cluster.address, **cluster.client_env()}
        code = "import ray; ray.init(); print(ray.get(ray.remote(lambda: 41 + 1).remote()))"
        ran = subprocess.run([sys.executable, "-c", code], env=joiner, capture_output=True, text=True, timeout=180)
        assert ran.returncode == 0 and ran.stdout.strip().endswith("42"), ran.stderr[-2000:]
        # the dashboard head's metrics server comes up last (measured: within ~15 s of readiness)
        deadline = time.monotonic() + 30
        while cluster.ports["dashboard_metrics"] not in {p for _, p, _ in _listeners(cluster.head.pid)}:
            assert time.monotonic() < deadline, (
                f"the dashboard's metrics port never opened: {_listeners(cluster.head.pid)}"
            )
            time.sleep(1)
        listening = _listeners(cluster.head.pid)
        assert len(listening) >= 6, listening  # gcs, raylet, object manager, agents, client server, ...
        assert [x for x in listening if not _loopback(x[0])] == [], listening
        ports = {p for _, p, _ in listening}
        assert cluster.ports["metrics_export"] not in ports, "the agent's metrics export is off"
        assert not ports & {44217, 44227}, "no Prometheus server on Ray's fixed autoscaler/dashboard ports"
        assert (
            not [  # --no-monitor: no autoscaler process
                p
                for p in psutil.Process(cluster.head.pid).children(recursive=True)
                if "autoscaler" in " ".join(p.cmdline())
            ]
        )

        private = cluster.temp_dir.parent
        assert oct(private.stat().st_mode & 0o777) == "0o700" and ray_temp.private_folder(cluster.temp_dir) == private
        (session,) = cluster.temp_dir.glob("session_2*")
        assert cluster.temp_dir.stat().st_mode & 0o777 == 0o777, "Ray opened its own dir (as it does)"
        if os.geteuid() == 0:
            assert not _can_write_as_other_user(cluster.temp_dir)
            assert not _can_write_as_other_user(session)
    finally:
        cluster.stop(grace_s=10)
    assert not private.exists(), "the stop removes the private folder with Ray's dir"
