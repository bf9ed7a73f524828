"""The in-job driver's lifecycle (grpokit.runtime.driver): ``close()`` runs on every path, in seconds.

Each test runs one attempt in this process with in-process stand-ins for Ray, a sidecar, the
trainer and Slurm's view of the task (``tests/doubles/driver_parts.py``), and checks what the close
must leave: the final ``status.json``, every stand-in stopped, no stand-in thread running, the
attempt's log handlers off the root logger, the signal handlers given back. Signals are real ones,
sent to this process from the trainer's thread as Slurm sends them to the job's batch step. What
only Slurm can show (its ``--signal`` timing, scancel, the requeue itself) stays in
``tests/integration/test_runtime_slurm.py`` and ``test_outcomes_slurm.py``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpokit.config.point import PointSpec
from grpokit.runtime import control
from grpokit.runtime.decisions import checkpoints, stop_decision
from grpokit.runtime.driver import STOP_SIGNALS, Driver
from grpokit.runtime.parts import Host, Parts
from grpokit.runtime.processes import stop_inquiry
from grpokit.slurm.stop_view import SlurmStopView

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("driver_parts_doubles", REPO / "tests" / "doubles" / "driver_parts.py")
doubles = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = doubles
_spec.loader.exec_module(doubles)

LEAD_S = 60  # cluster.signal_delay_s of the test point


@pytest.fixture(autouse=True)
def signal_handlers():
    """The driver takes USR2/TERM/INT; in a (stand-in) Slurm job it leaves USR2/TERM ignored after
    the close, as a job must. Every test gets this process's handlers back."""
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield saved
    for s, handler in saved.items():
        signal.signal(s, handler)


def make_spec(bare_point, tmp_path: Path, *, steps: int = 5, name: str = "000_lifecycle", **runtime) -> PointSpec:
    """One point as the sweep builds it, with a sidecar whose URL goes into the reward's kwargs."""
    ckpt = tmp_path / "ckpt" / name
    return bare_point(
        tmp_path / "logs" / "unit",
        int(name[:3]),
        {"gpus_per_node": 1, "signal_delay_s": LEAD_S},
        "unit",
        name=name,
        checkpoint_dir=str(ckpt),
        verl_overrides=[
            f"trainer.total_training_steps={steps}",
            "trainer.save_freq=1",
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=1",
            f"trainer.default_local_dir={ckpt}",
            "trainer.logger=[console,file]",
        ],
        # kill_grace_s / save_deadline_s: short, so that a stop that goes wrong fails in seconds
        runtime={"trainer_cmd": ["stand-in-trainer"], "kill_grace_s": 2, "save_deadline_s": 30, **runtime},
        sidecars={"memory": {"kind": "stand_in", "reward_kwargs": {"memory_url": "{url}/v1"}}},
    )


def run_attempt(spec, *, host=None, ray=None, sidecars=None, problems=(), script=None, ignore_save=False, clock=None):
    """One :meth:`Driver.run` with stand-ins; returns its exit status, the stand-ins and status.json."""
    ray, sidecars, trainers = ray or doubles.StandInRay(), sidecars or doubles.StandInSidecars(), []
    host = host or doubles.StandInHost()

    def start_trainer(cmd, log_path, *, env, cwd):
        t = doubles.StandInTrainer(cmd, log_path, env=env, cwd=cwd, script=script, ignore_save=ignore_save)
        trainers.append(t)
        return t

    parts = Parts(
        validate=lambda _spec: (None, list(problems)),
        start_ray=ray,
        sidecars=sidecars,
        start_trainer=start_trainer,
        host=host,
        clock=clock or time.monotonic,
        poll_s=0.05,
    )
    t0 = time.monotonic()
    code = Driver(spec, parts).run()
    status = json.loads((Path(spec.run_dir) / "status.json").read_text())
    return SimpleNamespace(
        code=code,
        ray=ray,
        sidecars=sidecars,
        trainers=trainers,
        host=host,
        status=status,
        attempt=status["attempts"][-1],
        seconds=time.monotonic() - t0,
    )


def assert_closed(r, spec, saved_handlers, *, in_slurm=False) -> None:
    """What every close leaves, whatever ended the attempt."""
    prefixes = (doubles.THREAD_PREFIX, "prune-watch", stop_inquiry.THREAD_NAME)
    left = [t.name for t in threading.enumerate() if t.name.startswith(prefixes)]
    assert left == [], f"still running after close: {left}"
    assert r.ray.clusters and all(c.stopped for c in r.ray.clusters)
    assert r.sidecars.running() == [] and r.sidecars.stopped == list(spec.sidecars)
    assert all(t.returncode is not None for t in r.trainers)
    assert r.host.clean_ups == 1
    assert r.attempt["end"] and r.attempt["ended_by"], "status.json closes the attempt"
    driver_logs = [
        h for h in logging.getLogger().handlers if str(getattr(h, "baseFilename", "")).startswith(spec.run_dir)
    ]
    assert driver_logs == [], "the attempt's log handler is taken off at close"
    for s in STOP_SIGNALS:
        if in_slurm and s in (signal.SIGUSR2, signal.SIGTERM):
            assert signal.getsignal(s) is signal.SIG_IGN, "a late signal must not end a finished job"
        else:
            assert signal.getsignal(s) == saved_handlers[s]
    assert r.seconds < 20


def test_completion(tmp_path, bare_point, signal_handlers):
    spec = make_spec(bare_point, tmp_path, steps=3)
    r = run_attempt(spec)
    assert (r.code, r.status["state"], r.attempt["ended_by"]) == (0, "completed", "completed")
    assert r.status["exit_code"] == 0 and r.status["last_step"] == 3
    assert (Path(spec.checkpoint_dir) / "latest_checkpointed_iteration.txt").read_text() == "3"
    cmd = (Path(spec.run_dir) / "verl_cmd.sh").read_text()
    assert f"memory_url={r.sidecars.started['memory'].url}/v1" in cmd, "the sidecar's URL reached the trainer"
    # the start-up timeline: the driver's marks (seconds after job start), in order; the stand-in
    # trainer prints no verl line, so those phases are named as not seen
    timeline = json.loads((Path(spec.run_dir) / "attempts" / "1" / "startup.json").read_text())
    at = {p["phase"]: p["at_s"] for p in timeline["phases"]}
    assert list(at) == ["ray_ready", "trainer_launched"] and 0 <= at["ray_ready"] <= at["trainer_launched"] < 20
    assert timeline["first_generation_s"] is None and "first_generation" in timeline["not_seen"]
    env = json.loads((Path(spec.run_dir) / "env.json").read_text())["trainer_env"]  # what the job set
    assert env["VLLM_DISABLE_COMPILE_CACHE"] == "0" and env["VLLM_LOGGING_LEVEL"] == "INFO"
    # the trainer joins the job's Ray as the cluster says (one node: on loopback, issue 36 item 4)
    (trainer,) = r.trainers
    assert trainer.env["RAY_ADDRESS"] == r.ray.clusters[0].address
    assert trainer.env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert_closed(r, spec, signal_handlers)


def test_validation_failure_stops_what_started_meanwhile(tmp_path, bare_point, signal_handlers):
    spec = make_spec(bare_point, tmp_path)
    problem = "point 000_lifecycle: data.max_prompt_length=9: too short; fix: at least 512"
    r = run_attempt(spec, problems=[problem])
    assert (r.code, r.status["state"], r.attempt["ended_by"]) == (1, "failed", "invalid")
    assert problem in r.status["reason"]
    assert r.trainers == [], "the trainer never starts for a point that does not validate"
    assert r.sidecars.started, "the sidecars came up while verl's check ran"
    assert_closed(r, spec, signal_handlers)


def test_sidecar_death_stops_the_trainer(tmp_path, bare_point, signal_handlers):
    spec = make_spec(bare_point, tmp_path)
    sidecars = doubles.StandInSidecars()
    r = run_attempt(spec, sidecars=sidecars, script={2: lambda _t: sidecars.die("memory")})
    assert (r.code, r.status["state"], r.attempt["ended_by"]) == (1, "failed", "sidecar_failed")
    assert "sidecar memory died (exit 1)" in r.status["reason"]
    assert "stand-in server crashed" in r.status["reason"], "the reason quotes the sidecar's log"
    assert r.trainers[0].stop_calls >= 1 and r.trainers[0].returncode == -15
    assert_closed(r, spec, signal_handlers)


def test_ray_death_stops_the_trainer(tmp_path, bare_point, signal_handlers):
    spec = make_spec(bare_point, tmp_path)
    ray = doubles.StandInRay()
    r = run_attempt(spec, ray=ray, script={2: lambda _t: ray.clusters[0].kill()})
    assert (r.code, r.status["state"], r.attempt["ended_by"]) == (1, "failed", "ray_failed")
    assert r.trainers[0].returncode == -15
    assert_closed(r, spec, signal_handlers)


def _send(sig):
    return lambda _trainer: os.kill(os.getpid(), sig)


@pytest.mark.parametrize(
    ("host_kw", "runtime", "expected"),
    [
        # Slurm's warning, lead_s + 10 s left: a time-out, requeued within the budget
        (dict(in_slurm=True, time_left_s=LEAD_S + 10), {}, ("requeued", "timeout", 1, 0)),
        # the same warning with the time-out budget spent: the point fails, nothing is requeued
        (dict(in_slurm=True, time_left_s=LEAD_S + 10), {"max_timeout_requeues": 0}, ("failed", "timeout", 0, 1)),
        # a preemption's warning (Slurm's PreemptTime set): requeued, not counted against the budget
        (
            dict(in_slurm=True, time_left_s=LEAD_S + 10, view=SlurmStopView(False, True)),
            {"max_timeout_requeues": 0},
            ("requeued", "preempted", 1, 0),
        ),
    ],
    ids=["time-out", "time-out-budget-spent", "preemption"],
)
def test_usr2_saves_then_decides(tmp_path, bare_point, signal_handlers, host_kw, runtime, expected):
    spec = make_spec(bare_point, tmp_path, **runtime)
    host = doubles.StandInHost(**host_kw)
    r = run_attempt(spec, host=host, script={2: _send(signal.SIGUSR2)})
    state, ended_by, requeues, code = expected
    assert (r.status["state"], r.attempt["ended_by"], host.requeues, r.code) == (state, ended_by, requeues, code)
    assert r.status["reason"] == "checkpointed step 2 on SIGUSR2"
    assert r.attempt["slurm_state"] == ("REQUEUED" if requeues else None)
    assert json.loads((Path(spec.run_dir) / "control" / "save_request").read_text())["reason"] == "SIGUSR2"
    assert (Path(spec.checkpoint_dir) / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert r.trainers[0].returncode == 1, "the trainer stopped itself after the save"
    assert_closed(r, spec, signal_handlers, in_slurm=True)


def test_sigterm_for_a_node_failure_names_the_node_and_leaves_the_requeue_to_slurm(
    tmp_path, bare_point, signal_handlers
):
    """Slurm requeues the job for a node failure (restart counted, no PreemptTime: what an
    administrator's requeue also looks like); the Ray worker's srun, in the attempt's Ray logs,
    names the node (the lines the local cluster printed with ``scontrol update state=down``)."""
    spec = make_spec(bare_point, tmp_path)
    host = doubles.StandInHost(in_slurm=True, time_left_s=500, view=SlurmStopView(True, False))

    def node_fails(_trainer):
        ray_logs = Path(spec.run_dir) / "attempts" / "1" / "ray"
        ray_logs.mkdir(parents=True, exist_ok=True)
        (ray_logs / "ray_worker_node2.log").write_text(
            "slurmstepd-node2: error: *** STEP 77.2 ON node2 CANCELLED AT 2026-12-03T13:00:27 DUE TO NODE FAILURE, "
            "SEE SLURMCTLD LOG FOR DETAILS ***\nsrun: error: Node failure on node2\n"
        )
        os.kill(os.getpid(), signal.SIGTERM)

    r = run_attempt(spec, host=host, script={2: node_fails})
    assert (r.status["state"], r.attempt["ended_by"], r.code) == ("requeued", "node_failed", 0)
    assert re.fullmatch(r"node node2 failed; Slurm requeues the job; checkpointed step \d+", r.attempt["reason"])
    assert host.requeues == 0 and "retry" not in r.attempt, "Slurm requeues it: no retry of the kit's spent"
    assert_closed(r, spec, signal_handlers, in_slurm=True)


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (
            SlurmStopView(False, False),
            ("cancelled", "cancelled", 1, "SIGTERM and Slurm does not requeue the job (scancel)"),
        ),
        (SlurmStopView(True, True), ("requeued", "preempted", 0, "SIGTERM: Slurm preempts and requeues the job")),
        # scontrol requeue: Slurm counts a restart, no PreemptTime
        (
            SlurmStopView(True, False),
            ("requeued", "preempted", 0, "SIGTERM: Slurm requeues the job without preempting"),
        ),
    ],
    ids=["scancel", "preempted-requeue-mode", "admin-requeue"],
)
def test_sigterm_saves_then_decides(tmp_path, bare_point, signal_handlers, view, expected):
    *expected, why = expected
    spec = make_spec(bare_point, tmp_path)
    host = doubles.StandInHost(in_slurm=True, time_left_s=500, view=view)
    r = run_attempt(spec, host=host, script={2: _send(signal.SIGTERM)})
    assert (r.status["state"], r.attempt["ended_by"], r.code) == tuple(expected)
    assert host.requeues == 0, "on SIGTERM Slurm requeues (or not) by itself"
    # a cancel's reason names the cancel (issue 36 item 7); a requeue's is the checkpoint
    cancel = f"{why}; " if expected[0] == "cancelled" else ""
    assert r.status["reason"] == f"{cancel}checkpointed step 2 on SIGTERM"
    assert r.attempt["reason"].startswith(why) and r.attempt["reason"].endswith("; checkpointed step 2 on SIGTERM")
    assert_closed(r, spec, signal_handlers, in_slurm=True)


@pytest.mark.timeout(60)
def test_a_cancel_is_closed_by_the_driver_within_kill_wait(tmp_path, bare_point, signal_handlers):
    """scancel (SIGTERM, Slurm does not requeue) of a trainer that ignores the save request, KillWait
    10 s: the driver stops it at 3.5 s with 0.58 s graces and closes the attempt ``cancelled`` with
    the cancel as the reason, well before Slurm's SIGKILL."""
    spec = make_spec(bare_point, tmp_path, steps=500)
    host = doubles.StandInHost(in_slurm=True, time_left_s=500, view=SlurmStopView(False, False))
    host.kill_wait = 10.0
    sent: list[float] = []

    def cancel(_trainer):
        sent.append(time.monotonic())
        signal.raise_signal(signal.SIGTERM)

    r = run_attempt(spec, host=host, script={2: cancel}, ignore_save=True)
    closed_after_s = time.monotonic() - sent[0]
    assert (r.status["state"], r.attempt["ended_by"], r.code) == ("cancelled", "cancelled", 1)
    assert r.status["reason"] == (
        "SIGTERM and Slurm does not requeue the job (scancel); stopped on SIGTERM without a new checkpoint "
        "(resumes from the last one)"
    )
    assert r.attempt["reason"] == r.status["reason"]  # the cancel once, not twice
    assert r.trainers[0].stop_graces and max(r.trainers[0].stop_graces) <= 7 / 12
    assert closed_after_s < 10.0 - stop_decision.KILL_WAIT_MARGIN_S, f"closed {closed_after_s:.1f} s after SIGTERM"
    assert_closed(r, spec, signal_handlers, in_slurm=True)


class SlowSlurmHost(doubles.StandInHost):
    """Slurm's answers after ``release`` is set (or ``delay_s``), each query recording its thread."""

    def __init__(self, *, release: threading.Event | None = None, delay_s: float = 5.0, **kw):
        super().__init__(**kw)
        self.release = release or threading.Event()
        self.delay_s = delay_s
        self.asked_on: list[str] = []

    def _slow(self, answer):
        self.asked_on.append(threading.current_thread().name)
        self.release.wait(self.delay_s)
        return answer

    def time_left_s(self):
        return self._slow(super().time_left_s())

    def stop_view(self):
        return self._slow(super().stop_view())


def test_the_stop_signal_handler_asks_slurm_nothing(tmp_path, bare_point, signal_handlers):
    """The handler records the signal, the clock and the save request and returns while Slurm has
    not answered (its queries block here until released); the inquiry's thread asks Slurm, and the
    request is complete once Slurm answers."""
    spec = make_spec(bare_point, tmp_path)
    host = SlowSlurmHost(in_slurm=True, time_left_s=20, view=SlurmStopView(False, True))
    driver = Driver(spec, Parts(host=host, clock=lambda: 1000.0))
    driver._install_signals()
    try:
        t = time.monotonic()
        os.kill(os.getpid(), signal.SIGUSR2)  # the handler runs in this thread before the next line
        handler_s = time.monotonic() - t
        assert driver.stop_signal == signal.SIGUSR2 and handler_s < 1.0, f"handler took {handler_s:.1f} s"
        assert control.save_requested(driver.ctl)["reason"] == "SIGUSR2", "the save request is written at once"
        provisional = driver._inquiry.current()
        assert (provisional.at, provisional.time_left_s, provisional.slurm_preempting) == (1000.0, None, None)
        assert provisional.save_budget_s == 30, "until Slurm answers: runtime.save_deadline_s"
        host.release.set()
        request = driver._inquiry.complete(wait_s=5)
        assert (request.time_left_s, request.slurm_preempting, request.slurm_requeues) == (20, True, False)
        assert request.save_budget_s == 20 - spec.runtime.kill_grace_s, "the budget ends a grace before the task's end"
        assert host.asked_on == [stop_inquiry.THREAD_NAME] * 2, "Slurm is asked on the inquiry's thread only"
    finally:
        host.release.set()
        driver._inquiry.close()
    assert not any(t.name == stop_inquiry.THREAD_NAME for t in threading.enumerate())


def test_the_stop_decision_waits_for_slurms_answers(tmp_path, bare_point, signal_handlers):
    """Slurm answers 2 s after the warning, long after the trainer saved (0.1 s steps): the decision
    still uses its answers (a preemption, not a time-out with its budget spent)."""
    spec = make_spec(bare_point, tmp_path, max_timeout_requeues=0)
    host = SlowSlurmHost(delay_s=1.0, in_slurm=True, time_left_s=LEAD_S + 10, view=SlurmStopView(False, True))
    r = run_attempt(spec, host=host, script={2: _send(signal.SIGUSR2)})
    assert (r.status["state"], r.attempt["ended_by"], host.requeues, r.code) == ("requeued", "preempted", 1, 0)
    assert r.attempt["reason"].startswith("USR2: Slurm is preempting the job")
    assert host.asked_on == [stop_inquiry.THREAD_NAME] * 2
    assert_closed(r, spec, signal_handlers, in_slurm=True)


_fs = importlib.util.spec_from_file_location("slurm_runner_double", REPO / "tests" / "doubles" / "slurm_runner.py")
fake_slurm = importlib.util.module_from_spec(_fs)
sys.modules[_fs.name] = fake_slurm
_fs.loader.exec_module(fake_slurm)


class SlurmThroughRunnerHost(doubles.StandInHost):
    """Slurm's part of the real :class:`Host` (own id, squeue, scontrol, requeue), everything else a stand-in."""

    task_id = Host.task_id
    time_left_s = Host.time_left_s
    stop_view = Host.stop_view

    def requeue_self(self) -> bool:
        self.requeues += 1
        return Host.requeue_self(self)


def test_a_warning_decided_and_requeued_through_slurms_answers(tmp_path, bare_point, signal_handlers, monkeypatch):
    """The whole USR2 path with Slurm's clients answered by the fake runner: the task's own time left
    (70 s) makes it a time-out, the driver requeues the task itself (``scontrol requeue 77_1``)."""
    fake = fake_slurm.FakeSlurm({"77_1": fake_slurm.FakeTask(time_left_s=LEAD_S + 10)}).install(monkeypatch)
    spec = make_spec(bare_point, tmp_path)
    host = SlurmThroughRunnerHost(in_slurm=True)
    r = run_attempt(spec, host=host, script={2: _send(signal.SIGUSR2)})
    assert (r.status["state"], r.attempt["ended_by"], r.code) == ("requeued", "timeout", 0)
    assert r.attempt["reason"].startswith("time-limit warning (own time left 70 s); time-out requeue 1 of")
    assert fake.commands("squeue") == [["squeue", "-h", "-j", "77_1", "-o", "%L"]]
    assert fake.commands("scontrol") == [["scontrol", "show", "job", "-o", "77_1"], ["scontrol", "requeue", "77_1"]]
    assert fake.tasks["77_1"].restarts == 1
    assert_closed(r, spec, signal_handlers, in_slurm=True)


def test_trainer_crash(tmp_path, bare_point, signal_handlers):
    spec = make_spec(bare_point, tmp_path)

    def crash(_trainer):
        raise doubles.Crash("CUDA error: an illegal memory access was encountered")

    r = run_attempt(spec, script={3: crash})
    assert (r.code, r.status["state"], r.attempt["ended_by"], r.status["exit_code"]) == (1, "failed", "failed", 3)
    assert "first error in trainer.log: RuntimeError: CUDA error: an illegal memory access" in r.status["reason"]
    assert r.status["last_step"] == 2
    assert_closed(r, spec, signal_handlers)


def test_trainer_that_ignores_the_save_request_is_stopped_at_the_deadline(tmp_path, bare_point, signal_handlers):
    """A fake clock that moves 100 s per reading passes the 30 s save budget at the next poll: the
    driver stops the trainer and the attempt ends without a new checkpoint, in well under a second
    of real time."""
    spec = make_spec(bare_point, tmp_path, steps=50)
    r = run_attempt(spec, script={2: _send(signal.SIGUSR2)}, ignore_save=True, clock=doubles.FakeClock(100))
    # outside Slurm: checkpoint and stop, the same command resumes it
    assert (r.code, r.status["state"], r.attempt["ended_by"]) == (0, "requeued", "preempted")
    assert r.status["reason"] == "stopped on SIGUSR2 without a new checkpoint (resumes from the last one)"
    assert r.trainers[0].returncode == -15 and r.trainers[0].stop_calls >= 1
    assert r.seconds < 5
    assert_closed(r, spec, signal_handlers)


def test_second_attempt_resumes_and_logs_apart(tmp_path, bare_point, signal_handlers):
    """Two attempts in one process: the second resumes the first's checkpoint; each driver.log
    holds its own attempt only and the root logger does not gain handlers."""
    spec = make_spec(bare_point, tmp_path)
    handlers_before = len(logging.getLogger().handlers)
    first = run_attempt(spec, script={2: _send(signal.SIGUSR2)})
    assert first.status["state"] == "requeued"
    second = run_attempt(spec)
    assert (second.code, second.status["state"], len(second.status["attempts"])) == (0, "completed", 2)
    assert second.attempt["resume_step"] == 2
    log1 = (Path(spec.run_dir) / "attempts" / "1" / "driver.log").read_text()
    assert "attempt 1" in log1 and "attempt 2" not in log1
    assert len(logging.getLogger().handlers) <= handlers_before
    assert_closed(second, spec, signal_handlers)


def test_a_real_trainer_process_tree_is_stopped_when_ray_dies(tmp_path, bare_point, signal_handlers):
    """The real trainer part (``TrainerProcess``: its own session, stopped as a tree): a trainer
    that never ends by itself and has a child of its own is gone, child included, after the close."""
    import psutil

    child_pid = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(child_pid)!r}, 'w').write(str(c.pid)); time.sleep(600)"
    )
    spec = make_spec(bare_point, tmp_path, trainer_cmd=["python", "-c", script])
    ray = doubles.StandInRay()

    def kill_ray_once_the_trainer_runs():
        deadline = time.monotonic() + 60
        while not child_pid.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        ray.clusters[0].kill()

    threading.Thread(target=kill_ray_once_the_trainer_runs, name=f"{doubles.THREAD_PREFIX}killer", daemon=True).start()
    parts = Parts(
        validate=lambda _spec: (None, []),
        start_ray=ray,
        sidecars=doubles.StandInSidecars(),
        host=doubles.StandInHost(),
        poll_s=0.05,
    )
    driver = Driver(spec, parts)
    assert driver.run() == 1
    status = json.loads((Path(spec.run_dir) / "status.json").read_text())
    assert (status["state"], status["attempts"][-1]["ended_by"]) == ("failed", "ray_failed")
    trainer_pid, child = driver.trainer.pid, int(child_pid.read_text())
    assert not psutil.pid_exists(trainer_pid) or psutil.Process(trainer_pid).status() == psutil.STATUS_ZOMBIE
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_zeroed_shard_of_the_newest_save_is_set_aside_with_its_reason_in_status(
    tmp_path, bare_point, signal_handlers
):
    """Issue 24 item 3: the driver records each save's file sizes while the trainer runs; a shard
    zeroed afterwards makes the next attempt resume the previous step, with the reason in status.json."""
    spec = make_spec(bare_point, tmp_path)
    first = run_attempt(spec, script={3: _send(signal.SIGUSR2)})
    assert first.status["state"] == "requeued"
    ckpt = Path(spec.checkpoint_dir)
    saved = sorted(int(p.parent.name.split("_")[-1]) for p in ckpt.glob(f"global_step_*/{checkpoints.MANIFEST}"))
    assert saved == [1, 2, 3], "every save got its sizes recorded (3: the save on request)"
    shard = ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt"
    size = shard.stat().st_size
    os.truncate(shard, 0)
    seen = []  # status.json's reason while the trainer runs: what `grpokit status` shows
    second = run_attempt(
        spec, script={3: lambda _t: seen.append(json.loads((Path(spec.run_dir) / "status.json").read_text()))}
    )
    assert second.attempt["resume_step"] == 2
    assert seen[0]["state"] == "running" and seen[0]["reason"] == second.attempt["checkpoint_set_aside"]
    note = second.attempt["checkpoint_set_aside"]
    assert note.startswith("checkpoint global_step_3 set aside as global_step_3.incomplete-"), note
    assert note.endswith(f"{shard} has 0 bytes, {size} at save ({checkpoints.MANIFEST}); resuming from global_step_2")
    log2 = (Path(spec.run_dir) / "attempts" / "2" / "driver.log").read_text()
    assert log2.count("is incomplete") == 1 and "model_world_size_1_rank_0.pt has 0 bytes" in log2
    assert second.status["state"] == "completed"
    assert_closed(second, spec, signal_handlers)


def test_a_tracker_naming_a_moved_step_and_a_flipped_shard_before_it_resume_the_step_before(
    tmp_path, bare_point, signal_handlers
):
    """Issue 36 item 3: the tracker names a step whose folder was moved away (the driver crashed on
    ``rename`` with FileNotFoundError, on every resubmit), and the step before has a shard of its recorded
    size with a byte flipped (sizes passed it): the attempt resumes the step before that, says why, completes."""
    spec = make_spec(bare_point, tmp_path)
    first = run_attempt(spec, script={3: _send(signal.SIGUSR2)})
    assert first.status["state"] == "requeued"
    ckpt = Path(spec.checkpoint_dir)
    assert (ckpt / checkpoints.TRACKER_FILE).read_text() == "3"
    (ckpt / "global_step_3").rename(ckpt / "global_step_3.incomplete-by-hand")
    shard = ckpt / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt"
    data = bytearray(shard.read_bytes())
    at = data.index(b"standin")  # inside its data.pkl (the pickled {"standin": "model"}), the size kept
    data[at] ^= 0xFF
    shard.write_bytes(data)
    assert checkpoints.inspect_checkpoint(ckpt / "global_step_2").complete  # by sizes: whole
    second = run_attempt(spec)
    assert second.status["state"] == "completed", second.status.get("reason")
    assert second.attempt["resume_step"] == 1
    assert second.attempt["checkpoint_set_aside"] == (
        f"{ckpt / checkpoints.TRACKER_FILE} names step 3 but {ckpt / 'global_step_3'} does not exist "
        "(and 1 more); resuming from global_step_1"
    )
    assert [p.name.split(".")[0] for p in sorted(ckpt.glob("global_step_2.incomplete-*"))] == ["global_step_2"]
    log2 = (Path(spec.run_dir) / "attempts" / "2" / "driver.log").read_text()
    assert f"{shard} is damaged: member model_world_size_1_rank_0/data.pkl" in log2
    assert "Bad CRC-32" in log2 and "checked the CRC-32s of global_step_1: 4 files" in log2
    assert_closed(second, spec, signal_handlers)


def test_the_checkpoint_crc_check_runs_while_ray_starts_and_still_sets_a_damaged_step_aside(
    tmp_path, bare_point, signal_handlers, monkeypatch
):
    """The CRC-32 read of the step to resume (about 13 s cold for a 10 GB step) overlaps the sidecars'
    and Ray's start; its verdict is joined before the trainer starts and is the same: the newest step,
    a byte flipped (sizes pass it), is set aside and the step before it resumed."""
    from grpokit.runtime import driver as driver_module
    from grpokit.runtime.decisions import resume_from

    spec = make_spec(bare_point, tmp_path)
    assert run_attempt(spec, script={3: _send(signal.SIGUSR2)}).status["state"] == "requeued"
    ckpt = Path(spec.checkpoint_dir)
    shard = ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt"
    data = bytearray(shard.read_bytes())
    data[data.index(b"standin")] ^= 0xFF
    shard.write_bytes(data)
    assert checkpoints.inspect_checkpoint(ckpt / "global_step_3").complete  # by sizes: whole

    ray_starting, checked_while_ray_started = threading.Event(), []

    def prepare_resume(*args, **kwargs):  # the real check, begun only once Ray's start has begun
        checked_while_ray_started.append(ray_starting.wait(10))
        return resume_from.prepare_resume(*args, **kwargs)

    monkeypatch.setattr(driver_module, "prepare_resume", prepare_resume)
    stand_in = doubles.StandInRay()

    def start_ray(**kwargs):
        ray_starting.set()
        return stand_in(**kwargs)

    seen = []  # status.json when the trainer runs: the verdict is recorded before it starts
    second = run_attempt(
        spec,
        ray=start_ray,
        script={3: lambda _t: seen.append(json.loads((Path(spec.run_dir) / "status.json").read_text()))},
    )
    assert checked_while_ray_started == [True], "the check waited for a Ray start that came only after it"
    assert second.status["state"] == "completed", second.status.get("reason")
    assert seen[0]["attempts"][-1]["resume_step"] == second.attempt["resume_step"] == 2
    assert seen[0]["reason"] == second.attempt["checkpoint_set_aside"]
    assert second.attempt["checkpoint_set_aside"].startswith("checkpoint global_step_3 set aside as global_step_3.")
    assert [p.name.split(".")[0] for p in ckpt.glob("global_step_3.incomplete-*")] == ["global_step_3"]
    assert stand_in.clusters and all(c.stopped for c in stand_in.clusters)


def test_a_wait_for_the_ray_start_slot_is_the_points_reason_meanwhile(
    tmp_path, bare_point, signal_handlers, monkeypatch
):
    """Issue 24 item 5: while another of the user's jobs starts its Ray on the node, status.json's
    reason says so (``grpokit status`` showed an empty ``running -/N``); the reason before it comes back."""
    from grpokit.runtime.processes import ray_cluster

    monkeypatch.setattr(ray_cluster, "START_LOCK", tmp_path / "ray-start.lock")
    for var in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID"):  # the holder is named by its pid
        monkeypatch.delenv(var, raising=False)
    spec = make_spec(bare_point, tmp_path, steps=2)
    status_path = Path(spec.run_dir) / "status.json"
    held, seen = threading.Event(), []

    def hold():  # the other job: holds the slot until the waiting point's status.json says it waits
        with ray_cluster.start_slot(30):
            held.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                reason = json.loads(status_path.read_text()).get("reason", "") if status_path.exists() else ""
                if reason.startswith("waiting for"):
                    seen.append(json.loads(status_path.read_text()))
                    return
                time.sleep(0.05)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    stand_in = doubles.StandInRay()

    def start_ray(**kwargs):  # the real start slot around the stand-in's start, as start_cluster does
        with ray_cluster.start_slot(kwargs["timeout_s"], kwargs.get("stop_requested"), kwargs.pop("on_wait")):
            return stand_in(**kwargs)

    r = run_attempt(spec, ray=start_ray)
    holder.join()
    assert seen and seen[0]["state"] == "running"
    at_most = float(spec.runtime.ray_start_timeout_s)
    assert seen[0]["reason"] == (
        f"waiting for this node's Ray start slot: pid {os.getpid()} starts its Ray; at most {at_most:.0f} s"
    )
    assert r.status["state"] == "completed" and r.status["reason"] == ""


def test_a_full_checkpoint_disk_fails_as_disk_full_and_is_not_retried(
    tmp_path, bare_point, signal_handlers, monkeypatch
):
    """torch's symptom (``basic_ios::clear``) is not the cause: the checkpoint folder has no free
    space, which no other node can fix (a shared file system): ``disk_full`` from the first attempt,
    no requeue although ``runtime.max_retries`` would retry a crash."""
    from grpokit.run_folder.heartbeat import read_record
    from grpokit.runtime.decisions import disk_full

    spec = make_spec(bare_point, tmp_path, max_retries=1)
    ckpt = spec.checkpoint_dir
    monkeypatch.setattr(
        disk_full, "free_bytes", lambda folders: {str(f): 0 if str(f) == ckpt else 10**9 for f in folders}
    )

    def crash(_trainer):
        raise doubles.Crash("basic_ios::clear: iostream error")

    host = doubles.StandInHost(in_slurm=True)
    r = run_attempt(spec, host=host, script={3: crash})
    assert (r.code, r.status["state"], r.attempt["ended_by"]) == (1, "failed", "disk_full")
    assert r.status["reason"].startswith(f"disk full writing {ckpt} (0 bytes free); trainer exited with 3")
    assert host.requeues == 0 and "retry" not in r.attempt
    record = read_record(spec.run_dir)
    assert record.outcome == {"state": "failed", "ended_by": "disk_full", "reason": r.status["reason"]}
    assert_closed(r, spec, signal_handlers, in_slurm=True)


def test_a_run_folder_deleted_while_the_point_runs_stops_it_without_retry_or_anything_recreated(
    tmp_path, bare_point, signal_handlers, caplog
):
    """``rm -rf`` of a running point's folder (issue 36.5): the trainer is stopped, the job ends
    (exit 1, no requeue, no node excluded although ``runtime.max_retries`` would retry a crash), and
    neither the run folder nor its status.json is written again."""
    import shutil

    spec = make_spec(bare_point, tmp_path, max_retries=2)
    run_dir = Path(spec.run_dir)

    def rm_rf(_trainer):
        shutil.rmtree(run_dir)

    host, trainers = doubles.StandInHost(in_slurm=True), []

    def start_trainer(cmd, log_path, *, env, cwd):
        trainers.append(doubles.StandInTrainer(cmd, log_path, env=env, cwd=cwd, script={2: rm_rf}))
        return trainers[-1]

    parts = Parts(
        validate=lambda _spec: (None, []),
        start_ray=doubles.StandInRay(),
        sidecars=doubles.StandInSidecars(),
        start_trainer=start_trainer,
        host=host,
        poll_s=0.05,
    )
    with caplog.at_level(logging.INFO):
        code = Driver(spec, parts).run()
    assert code == 1
    assert not run_dir.exists(), "nothing recreated (no status.json in a new empty folder)"
    assert host.requeues == 0, "not retried: no requeue, so no node excluded either"
    assert trainers[0].returncode is not None and all(c.stopped for c in parts.start_ray.clusters)
    line = f"point {spec.name}: cancelled (run_folder_gone) run folder {run_dir} was deleted or moved while"
    assert any(r.getMessage().startswith(line) for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_the_outcome_reaches_the_readers_when_status_json_cannot_be_written(
    tmp_path, bare_point, signal_handlers, monkeypatch
):
    import errno

    from grpokit.reports.summary import point_reason
    from grpokit.run_folder.point_state import point_state
    from grpokit.run_folder.status_file import StatusFile
    from grpokit.run_folder.status_record import PointStatus
    from grpokit.run_folder.sweep_reader import Point

    def enospc(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(StatusFile, "finish", enospc)
    spec = make_spec(bare_point, tmp_path)

    def crash(_trainer):
        raise doubles.Crash("CUDA error: an illegal memory access was encountered")

    code = Driver(
        spec,
        Parts(
            validate=lambda _spec: (None, []),
            start_ray=doubles.StandInRay(),
            sidecars=doubles.StandInSidecars(),
            start_trainer=lambda cmd, log_path, *, env, cwd: doubles.StandInTrainer(
                cmd, log_path, env=env, cwd=cwd, script={2: crash}
            ),
            host=doubles.StandInHost(),
            poll_s=0.05,
        ),
    ).run()
    assert code == 1
    status = json.loads((Path(spec.run_dir) / "status.json").read_text())
    assert status["state"] == "running" and status["attempts"][-1]["end"] is None  # as the full disk left it
    point = Point(index=0, name=spec.name, run_dir=Path(spec.run_dir), status=PointStatus.from_json(status))
    assert point_state(point, None) == "failed"
    assert "trainer exited with 3; first error in trainer.log: RuntimeError: CUDA error" in point_reason(point, None)


def test_a_later_point_starts_from_the_compile_cache_of_a_sibling_that_logged_a_step(
    tmp_path, bare_point, signal_handlers
):
    first = make_spec(bare_point, tmp_path, steps=2)
    kernel = Path(first.checkpoint_dir) / ".compile_cache" / "triton" / "abc" / "chunk_fwd.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"compiled")  # as Triton leaves it during the engine's first forward pass
    r1 = run_attempt(first)
    assert r1.status["state"] == "completed" and "compile_cache_seeded_from" not in r1.attempt  # its own
    listed = json.loads((kernel.parents[2] / "COMPLETE.json").read_text())["files"]
    assert listed == {"triton/abc/chunk_fwd.cubin": 8}

    second = make_spec(bare_point, tmp_path, steps=2, name="001_lifecycle")
    r2 = run_attempt(second)
    assert r2.attempt["compile_cache_seeded_from"] == str(kernel.parents[2])
    copy = Path(second.checkpoint_dir) / ".compile_cache" / "triton" / "abc" / "chunk_fwd.cubin"
    assert copy.read_bytes() == b"compiled"
    env = json.loads((Path(second.run_dir) / "env.json").read_text())["trainer_env"]
    assert env["TRITON_CACHE_DIR"] == str(copy.parents[1])  # the copy is read, under its own point
    assert_closed(r2, second, signal_handlers)
