"""Where the job's Ray listens: loopback for a one-node job, the node's job address otherwise; no
unauthenticated metrics server on another interface.

Measured with Ray 2.60 (``ray start --head --node-ip-address=127.0.0.1``, the kit's flags before this):
Ray's CLI replaces a loopback node address by the host's address (``services.resolve_ip_for_localhost``
calls ``get_node_ip_address``), so the GCS, raylet, object manager, workers and the dashboard agent's
gRPC listened on ``::`` (every interface), the Ray client server and the agents on the host's
address, and two Prometheus servers without authentication on ``0.0.0.0``: the autoscaler's
(``AUTOSCALER_METRIC_PORT``, 44217) and the dashboard head's (``DASHBOARD_METRIC_PORT``, 44227;
both fixed ports, so the second job on a node could not even start its own).

What the kit sets (each read in Ray 2.60's source):

- one node: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (:data:`LOOPBACK_SWITCH`). With it
  ``services.get_node_ip_address`` answers ``127.0.0.1`` (the switch's other use, refusing a worker
  node's ``ray start --address``, concerns no one-node job), so the node address stays loopback and
  every Ray server binds loopback: the C++ gRPC servers bind loopback only when the node address is
  loopback, the Python ones (agents, client server, metrics) bind the node address. Every process
  that joins this Ray (the readiness probe, verl's trainer) needs the same value, or its own node
  address is the host's and ``ray.init`` finds no raylet of its address: :func:`client_env`.
- several nodes: the node address is the job's address (``--node-ip-address``); Ray 2.60's C++
  gRPC servers then bind every interface (no option for an address; ``src/ray/rpc/grpc_server``),
  authenticated by the job's Ray token (``RAY_AUTH_MODE=token``, :func:`grpokit.runtime.processes.
  ray_cluster.auth_env`). The rest binds the job's address.
- ``--no-monitor`` (``ray start``'s hidden flag; ``RayParams.no_monitor``): no autoscaler process,
  so no autoscaler metrics server (a fixed-size Slurm allocation has nothing to scale).
- ``DASHBOARD_METRIC_PORT`` = a port the kit reserved for the node: the dashboard head's Prometheus
  server (started even with ``--include-dashboard=false``) gets a port of its own. Ray binds it to
  loopback when the node address is loopback (one node), else to every interface (``dashboard/head.py``
  ``_setup_metrics``: no option); it serves the dashboard process's own counters (its CPU, memory,
  request counts), not the job's.
- ``RAY_enable_metrics_collection=0`` (:data:`METRICS_SWITCH`): the dashboard agent's metrics export
  (``--metrics-export-port``) is not started.
"""

from __future__ import annotations

#: Ray's switch for its metrics agent (``RayConfig`` ``enable_metrics_collection``; with 0 the raylet
#: starts the dashboard agent with ``--disable-metrics-collection``, which opens no Prometheus port).
METRICS_SWITCH = "RAY_enable_metrics_collection"
#: ``ray_constants.ENABLE_RAY_CLUSTER``'s variable; ``0`` keeps a one-node Ray on loopback.
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: ``ray.dashboard.consts.DASHBOARD_METRIC_PORT``'s variable.
DASHBOARD_METRICS_PORT = "DASHBOARD_METRIC_PORT"
#: ``ray start`` flag: no autoscaler monitor (and so no autoscaler metrics server).
NO_MONITOR = "--no-monitor"


def metrics_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with Ray's metrics export off unless the job set :data:`METRICS_SWITCH` itself.

    Ray serves its Prometheus metrics without authentication on ``--metrics-export-port``, bound to
    every interface unless the agent's node address is loopback (ray ``reporter_agent.py``). Nothing
    in verl reads them. ``runtime.env: {RAY_enable_metrics_collection: "1"}`` turns them back on (as
    Ray binds them: loopback for a one-node job, every interface for several nodes).
    """
    return env if METRICS_SWITCH in env else {**env, METRICS_SWITCH: "0"}


def client_env(one_node: bool) -> dict[str, str]:
    """What every process of the job that starts or joins its Ray needs in its environment
    (``{}`` for several nodes; for one node :data:`LOOPBACK_SWITCH` = ``0``)."""
    return {LOOPBACK_SWITCH: "0"} if one_node else {}


def node_env(env: dict[str, str], *, one_node: bool, dashboard_metrics_port: int | None) -> dict[str, str]:
    """The environment of ``ray start``: ``env`` with metrics off (:func:`metrics_env`), the node on
    loopback for one node (:func:`client_env`) and the dashboard's metrics on ``dashboard_metrics_port``
    (None: Ray's fixed 44227; a worker node starts no dashboard)."""
    out = {**metrics_env(env), **client_env(one_node)}
    if dashboard_metrics_port:
        out[DASHBOARD_METRICS_PORT] = str(dashboard_metrics_port)
    return out
