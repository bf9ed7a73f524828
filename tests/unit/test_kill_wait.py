"""Stop within Slurm's limits (issue 36 item 7): after a SIGTERM the driver's save and every
process stop fit into Slurm's KillWait less a margin, so a cancelled attempt is closed by its
driver (``cancelled``, the reason naming the cancel) before Slurm's SIGKILL. The driver's wiring:
``tests/unit/test_driver_lifecycle.py::test_a_cancel_is_closed_by_the_driver_within_kill_wait``.

Slurm's KillWait here is 10 s (``scontrol show config``: ``KillWait                = 10 sec``).
"""

from __future__ import annotations

import signal

import pytest

from grpokit.runtime.decisions.stop_decision import (
    DEFAULT_KILL_WAIT_S,
    KILL_WAIT_MARGIN_S,
    STOPS_AFTER_SIGTERM,
    StopRequest,
    save_budget_s,
    sigterm_grace,
)
from grpokit.slurm import kill_wait

CONFIG = """Configuration data as of 2026-12-04T23:40:00
KeepAliveTime           = SYSTEM_DEFAULT
KillOnBadExit           = 0
KillWait                = 10 sec
LaunchParameters        = (null)
"""


def test_kill_wait_is_read_from_scontrol_show_config():
    assert kill_wait.parse_kill_wait(CONFIG) == 10.0
    assert kill_wait.parse_kill_wait("KillOnBadExit = 0\n") is None


@pytest.mark.parametrize(
    ("kill_wait_s", "in_slurm", "expected"),
    [
        (10.0, True, (7.0, 3.5, 7.0 / 12)),  # this cluster: closed 3 s before SIGKILL
        (None, True, (27.0, 13.5, 27.0 / 12)),  # unknown: Slurm's default KillWait, 30 s
        (300.0, True, (297.0, 297.0 - 6 * 15.0, 15.0)),  # a long KillWait: each stop keeps runtime.kill_grace_s
        (2.0, True, (1.0, 0.5, 1.0 / 12)),  # shorter than the margin: still a second
        (None, False, (None, 30.0, 15.0)),  # outside Slurm nothing kills the driver: as before
    ],
)
def test_sigterm_grace_fits_kill_wait(kill_wait_s, in_slurm, expected):
    term = sigterm_grace(kill_wait_s, kill_grace_s=15.0, in_slurm=in_slurm)
    assert (term.total_s, term.save_s, term.stop_s) == pytest.approx(expected)
    if term.total_s is not None:
        assert term.save_s + STOPS_AFTER_SIGTERM * term.stop_s == pytest.approx(term.total_s)
        assert term.total_s <= max(1.0, (kill_wait_s or DEFAULT_KILL_WAIT_S) - KILL_WAIT_MARGIN_S)
        assert term.save_s >= term.total_s / 2


def test_the_save_budget_and_the_stops_follow_it():
    term = sigterm_grace(10.0, kill_grace_s=15.0, in_slurm=True)
    term_budget = save_budget_s(signal.SIGTERM, time_left_s=None, save_deadline_s=900, grace_s=15, term=term)
    assert term_budget == 3.5  # not 2 x kill_grace_s = 30 s, three times KillWait
    usr2 = save_budget_s(signal.SIGUSR2, time_left_s=None, save_deadline_s=900, grace_s=15, term=term)
    assert usr2 == 900  # the warning's lead is not KillWait
    req = StopRequest(signal.SIGTERM, at=100.0, save_budget_s=term_budget, term=term)
    assert (req.stop_grace_s, req.kill_at, req.deadline) == (pytest.approx(7 / 12), 107.0, 103.5)
    warn = StopRequest(signal.SIGUSR2, at=100.0, save_budget_s=usr2, term=term)
    assert (warn.stop_grace_s, warn.kill_at) == (None, None)


@pytest.mark.slurm
def test_kill_wait_of_the_local_cluster(slurm):
    """The real ``scontrol show config`` answers (the local cluster's KillWait)."""
    import subprocess

    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=20).stdout
    kill_wait._asked.clear()
    assert kill_wait.kill_wait_s() == kill_wait.parse_kill_wait(out) is not None
