"""The no-progress watchdog: its limits, its reading of verl's metrics file, and the stack dumps."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from grpokit.runtime.processes import watchdog
from grpokit.runtime.processes.watchdog import Hang, HangPolicy, Progress, Watchdog, decide

POLICY = HangPolicy(floor_s=100, step_multiple=5, startup_s=1000)


def test_policy_from_the_runtime_section():
    assert HangPolicy.from_runtime({}) == HangPolicy(1800, 5, 3600)
    assert HangPolicy.from_runtime({"hang_floor_s": 60, "hang_step_multiple": 3, "hang_startup_s": 600}) == (
        HangPolicy(60, 3, 600)
    )
    assert HangPolicy.from_runtime({"hang_floor_s": None}) is None
    assert HangPolicy.from_runtime({"hang_floor_s": 0}) is None
    with pytest.raises(ValueError, match="runtime.hang_step_multiple must be > 0"):
        HangPolicy.from_runtime({"hang_step_multiple": -1})
    with pytest.raises(ValueError, match="runtime.hang_startup_s must be a number"):
        HangPolicy.from_runtime({"hang_startup_s": "soon"})


def test_before_the_first_step_the_startup_allowance_applies():
    p = Progress(started_at=0.0)
    assert decide(POLICY, p, 999) is None
    hang = decide(POLICY, p, 1001)
    assert isinstance(hang, Hang) and hang.last_step is None and hang.limit_s == 1000
    assert "before its first step" in hang.describe() and "hang_startup_s=1000" in hang.describe()


def test_after_steps_the_limit_is_the_floor_or_a_multiple_of_the_longest_step():
    p = Progress(started_at=0.0)
    assert p.observe(1, 500.0, step_time_s=10.0)  # verl's timing_s/step of step 1
    assert decide(POLICY, p, 500 + 100) is None  # floor 100 > 5 x 10
    hang = decide(POLICY, p, 500 + 101)
    assert hang.last_step == 1 and hang.limit_s == 100 and "hang_floor_s=100" in hang.basis
    # a slow step (e.g. with validation and a save): measured between two new steps
    assert p.observe(2, 540.0)
    assert p.step_s == 40.0
    assert decide(POLICY, p, 540 + 200) is None  # 5 x 40 = 200 > floor
    hang = decide(POLICY, p, 540 + 201)
    assert hang.limit_s == 200 and "hang_step_multiple=5 x step time 40.0 s" in hang.describe()
    assert "after step 2" in hang.describe()


def test_a_step_seen_again_is_not_progress():
    p = Progress(started_at=0.0)
    assert p.observe(5, 10.0)  # verl's val_before_train line, at the resumed step
    assert not p.observe(5, 20.0)
    assert p.last_step_at == 10.0 and p.step_s is None  # still in the start-up allowance


def _line(step: int, step_s: float | None = None) -> bytes:
    data = {"critic/score/mean": 0.5}
    if step_s is not None:
        data["timing_s/step"] = step_s
    return (json.dumps({"step": step, "data": data}) + "\n").encode()


def test_the_watchdog_reads_only_new_lines_of_the_metrics_file(tmp_path: Path):
    path = tmp_path / "metrics.jsonl"
    w = Watchdog(POLICY, path, started_at=0.0, interval_s=0)
    assert w.poll(now=10) is None  # no file yet: start-up
    with open(path, "wb", buffering=0) as fp:
        fp.write(_line(1, 2.0))
        assert w.poll(now=20) is None
        assert w.progress.last_step == 1 and w.progress.last_step_at == 20
        fp.write(_line(2, 2.0)[:10])  # half a line: not a step yet
        assert w.poll(now=30) is None and w.progress.last_step == 1
        fp.write(_line(2, 2.0)[10:])
        assert w.poll(now=40) is None and w.progress.last_step == 2
    assert w.progress.step_s == 20.0  # wall time between the two new steps
    hang = w.poll(now=40 + 101)
    assert hang is not None and hang.last_step == 2 and round(hang.idle_s) == 101


def test_polls_are_rate_limited(tmp_path: Path):
    w = Watchdog(POLICY, tmp_path / "m.jsonl", started_at=0.0, interval_s=5)
    assert w.poll(now=2000) is not None
    assert w.poll(now=2001) is None  # within the interval: not even read


SLEEPER = """
import sys, time
sys.path.insert(0, {launch!r})
from grpokit.runtime.processes import watchdog
{install}
def stuck_in_a_collective():
    print("ready", flush=True)
    time.sleep(600)
stuck_in_a_collective()
"""


def _start(tmp_path: Path, install: bool) -> subprocess.Popen:
    code = SLEEPER.format(
        launch=str(Path(watchdog.__file__).parents[2]),
        install="assert watchdog.install_stack_handler()" if install else "",
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={"GRPOKIT_STACKS_DIR": str(tmp_path / "stacks"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.timeout(60)
def test_py_spy_dumps_the_stack_of_a_stuck_process(tmp_path: Path):
    if watchdog.py_spy() is None:
        pytest.skip("py-spy is not installed")
    proc = _start(tmp_path, install=False)
    try:
        text = watchdog.dump_stacks([("trainer", proc.pid)], tmp_path / "stacks")
    finally:
        proc.kill()
        proc.wait()
    assert f"=== trainer pid {proc.pid}" in text and "[py-spy]" in text
    assert "stuck_in_a_collective" in text, text


@pytest.mark.timeout(60)
def test_without_py_spy_the_kits_faulthandler_writes_the_stack(tmp_path: Path, monkeypatch):
    # py-spy cannot attach on clusters with kernel.yama.ptrace_scope >= 1: the fallback path.
    monkeypatch.setattr(watchdog, "py_spy", lambda: None)
    handled = _start(tmp_path, install=True)
    plain = _start(tmp_path, install=False)
    try:
        assert watchdog.catches(handled.pid, signal.SIGUSR1)
        assert not watchdog.catches(plain.pid, signal.SIGUSR1)
        text = watchdog.dump_stacks([("ray::TaskRunner", handled.pid), ("trainer", plain.pid)], tmp_path / "stacks")
        time.sleep(0.2)
        assert plain.poll() is None, "a process without the handler must not be sent the signal (it would die)"
        assert handled.poll() is None, "faulthandler's dump does not stop the process"
    finally:
        for p in (handled, plain):
            p.kill()
            p.wait()
    assert "[faulthandler; py-spy is not installed]" in text
    assert "stuck_in_a_collective" in text, text
    assert f"pid {plain.pid}" in text and "the process has no faulthandler for SIGUSR1" in text
    watchdog.tidy_stacks_dir(tmp_path / "stacks")  # the handled process's file is not empty: kept
    assert [p.name for p in (tmp_path / "stacks").iterdir()] == [f"{socket.gethostname()}-{handled.pid}.txt"]


def test_stacks_file_starts_with_the_verdict(tmp_path: Path):
    hang = Hang(idle_s=130, limit_s=100, last_step=3, step_s=2.0, basis="runtime.hang_floor_s=100 > 5 x step")
    out = tmp_path / "hang_stacks.txt"
    size = watchdog.write_stacks_file(out, hang, [], None, remote=[("node9", ["false"])])
    text = out.read_text()
    assert size == len(text)
    assert text.startswith("# no new step for 130 s after step 3 (limit 100 s")
    assert "##### node node9\n(nothing; exit 1" in text


RAY_START_STANDIN = """
import subprocess, sys, time
# stands in for `ray start --block --address=...` on another node: its child is titled like a Ray
# actor (Ray's setproctitle), the actor starts an engine process (as vLLM's EngineCore is started)
child = subprocess.Popen(["bash", "-c", 'exec -a "ray::TaskRunner.run" {python} {actor}'])
agent = subprocess.Popen(["bash", "-c", 'exec -a "ray::DashboardAgent" sleep 600'])
print("ready", flush=True)
time.sleep(600)
"""
ACTOR = """
import subprocess, time
subprocess.Popen([{python!r}, {engine!r}])
def fit_loop_waiting_on_a_collective():
    time.sleep(600)
fit_loop_waiting_on_a_collective()
"""
ENGINE = "import time\ndef engine_core_busy_loop():\n    time.sleep(600)\nengine_core_busy_loop()\n"


@pytest.mark.timeout(60)
def test_the_node_side_dump_finds_the_jobs_ray_workers_by_the_heads_address(tmp_path: Path):
    """What the driver runs on each other node through srun: this node's Ray workers of this job only."""
    if watchdog.py_spy() is None:
        pytest.skip("py-spy is not installed")
    address = "10.9.8.7:6123"
    engine, actor = tmp_path / "engine.py", tmp_path / "actor.py"
    engine.write_text(ENGINE)
    actor.write_text(ACTOR.format(python=sys.executable, engine=str(engine)))
    code = RAY_START_STANDIN.format(python=sys.executable, actor=actor)
    standin = subprocess.Popen(
        [sys.executable, "-c", code, "start", "--block", f"--address={address}"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert standin.stdout.readline().strip() == "ready"
        time.sleep(2.0)  # the actor's and the engine's interpreters start
        out = subprocess.run(
            [sys.executable, "-m", "grpokit.runtime.processes.watchdog", f"--ray-address={address}"],
            capture_output=True,
            text=True,
            timeout=45,
        ).stdout
        other = subprocess.run(
            [sys.executable, "-m", "grpokit.runtime.processes.watchdog", "--ray-address=10.0.0.1:1"],
            capture_output=True,
            text=True,
            timeout=45,
        ).stdout
    finally:
        for child in psutil.Process(standin.pid).children(recursive=True):
            child.kill()
        standin.kill()
        standin.wait()
    assert "=== ray::TaskRunner.run pid" in out and "fit_loop_waiting_on_a_collective" in out, out
    assert "engine_core_busy_loop" in out, "processes started by a Ray worker are included"
    assert "DashboardAgent" not in out, "Ray's own agents are left out"
    assert "(no ray start --address=10.0.0.1:1 on" in other


@pytest.mark.parametrize(
    ("runtime", "key"),
    [
        ({"hang_step_multiple": -1}, "runtime.hang_step_multiple"),
        ({"hang_startup_s": 0}, "runtime.hang_startup_s"),
        ({"hang_floor_s": "soon"}, "runtime.hang_floor_s"),
        ({"ray_object_store_fraction": 1.5}, "runtime.ray_object_store_fraction"),
        ({"ray_worker_ports": 5}, "runtime.ray_worker_ports"),
    ],
)
def test_bad_watchdog_and_ray_keys_are_refused_before_submission(runtime, key):
    from types import SimpleNamespace

    from grpokit.validate.kit_checks import check_runtime

    (problem,) = check_runtime(SimpleNamespace(name="003_n-4", runtime=runtime))
    assert problem.point == "003_n-4" and problem.key == key and problem.fix
    ok = {"hang_floor_s": None, "hang_step_multiple": 5, "ray_object_store_fraction": 0.3, "ray_worker_ports": None}
    assert check_runtime(SimpleNamespace(name="p", runtime=ok)) == []
