"""One Ray start at a time on a node (grpokit.runtime.processes.ray_cluster.start_slot): the node-local lock."""

from __future__ import annotations

import threading
import time

import pytest

from grpokit.runtime.processes import ray_cluster


@pytest.fixture(autouse=True)
def lock_file(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_cluster, "START_LOCK", tmp_path / "ray-start.lock")


def _hold(seconds: float, started: threading.Event) -> threading.Thread:
    def run():
        with ray_cluster.start_slot(60):
            started.set()
            time.sleep(seconds)

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(10)
    return thread


def test_a_second_start_waits_for_the_first():
    holder = _hold(1.5, threading.Event())
    t0 = time.monotonic()
    with ray_cluster.start_slot(60):
        waited = time.monotonic() - t0
    holder.join()
    assert 1.0 < waited < 10, waited


def test_a_holder_that_does_not_let_go_is_waited_for_at_most_max_wait(caplog):
    holder = _hold(5, threading.Event())
    t0 = time.monotonic()
    with ray_cluster.start_slot(1):
        waited = time.monotonic() - t0
    assert 1.0 < waited < 4, waited
    assert "held the start slot 1 s: starting anyway" in caplog.text
    holder.join()


def test_a_stop_signal_while_waiting_gives_the_start_up():
    holder = _hold(3, threading.Event())
    asked = time.monotonic() + 0.5
    with pytest.raises(ray_cluster.RayStartInterrupted), ray_cluster.start_slot(60, lambda: time.monotonic() > asked):
        pass
    holder.join()
