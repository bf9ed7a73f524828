"""Where the job's Ray listens (issue 36 item 4): the environment and flags ``ray start`` gets."""

from __future__ import annotations

from grpokit.runtime.processes import ray_listen


def test_a_one_node_ray_stays_on_loopback_with_metrics_off_and_its_dashboard_metrics_on_its_own_port():
    env = ray_listen.node_env({"A": "1"}, one_node=True, dashboard_metrics_port=23999)
    assert env == {
        "A": "1",
        "RAY_enable_metrics_collection": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "DASHBOARD_METRIC_PORT": "23999",
    }
    assert ray_listen.client_env(True) == {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def test_several_nodes_keep_their_job_address():
    env = ray_listen.node_env({}, one_node=False, dashboard_metrics_port=None)
    assert env == {"RAY_enable_metrics_collection": "0"}
    assert ray_listen.client_env(False) == {}


def test_the_jobs_own_metrics_setting_is_kept():
    asked = {"RAY_enable_metrics_collection": "1"}
    assert (
        ray_listen.node_env(asked, one_node=True, dashboard_metrics_port=None)["RAY_enable_metrics_collection"] == "1"
    )
