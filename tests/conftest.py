"""Fixtures shared by the unit and integration tests."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpokit.run_folder import FINAL_STATES, read_status

# --- the kit end to end: sweeps through launch/sweep.py, jobs on the local Slurm cluster ---------

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GRPOKIT_SHARED", REPO.parent / "shared"))
FAKE_TRAINER = REPO / "tests" / "doubles" / "fake_verl_trainer.py"
FINAL = FINAL_STATES  # the kit's own final states (grpokit.run_folder.states)


@functools.cache
def slurm_up() -> bool:
    """Whether the local Slurm cluster is up; asked once per test process (the answer is kept).

    False only when there is no ``sinfo``, no controller listens (``connect failure``: the cluster
    was not started) or no node can run jobs. A controller busy with three test workers' jobs may
    answer late or with an error: it is asked again for up to 60 s, and then counts as up, so a
    test fails on what it waits for instead of skipping (a busy cluster is not an absent one).
    """
    if not shutil.which("sinfo"):
        return False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            continue
        if out.returncode == 0:
            return any(s.startswith(("idle", "mix", "alloc", "comp")) for s in out.stdout.split())
        if "connect failure" in out.stderr:
            return False
        time.sleep(2)
    return True


def run_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every pytest process of one test run shares.

    ``$GRPOKIT_TEST_SHARED_DIR`` when set (``make test`` sets one for its three pytest commands),
    else the run's base temporary folder: pytest-xdist's workers' common parent, or the one
    process's own ``--basetemp``.
    """
    if os.environ.get("GRPOKIT_TEST_SHARED_DIR"):
        return Path(os.environ["GRPOKIT_TEST_SHARED_DIR"])
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build) -> Path:
    """``build(folder) -> Path`` run once for all pytest processes of a run; the others wait and reuse it.

    The folder is ``<run_shared_dir>/<name>``; an exclusive ``flock`` on ``<name>.lock`` orders
    the processes, and ``<name>.done`` (written last) holds the result, so a build that failed
    half-way is built again by the next process. Sharing the built files also shares their
    paths, and with them the verl verdicts recorded for configs that name them
    (:mod:`grpokit.validate.verl_verdicts`): one verl import per config for the whole run, not
    one per pytest worker.
    """
    import fcntl

    root = run_shared_dir(tmp_path_factory)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / f"{name}.done"
        if not done.exists():
            folder = root / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            done.write_text(str(build(folder)))
        return Path(done.read_text())


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default random-weight smoke model (`launch/make_tiny_model.py`), built once a run."""
    from grpokit.models import build_model

    return built_once(tmp_path_factory, "tiny_model", lambda out: build_model(out / "tiny", like="tiny", seed=0))


@pytest.fixture(scope="session")
def gsm8k_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real GSM8K (``$GRPOKIT_SHARED/data/gsm8k``, ``kit.shared``) in verl's parquet format, built once a run."""
    from grpokit.tasks.gsm8k.data import build

    def build_gsm8k(out: Path) -> Path:
        build(str(SHARED / "data" / "gsm8k"), out)
        return out

    return built_once(tmp_path_factory, "gsm8k", build_gsm8k)


@pytest.fixture
def kit_overrides(tiny_model_dir: Path, gsm8k_dir: Path, tmp_path: Path) -> list[str]:
    """Overrides every end-to-end test uses: tiny model, real GSM8K, the trainer TEST DOUBLE."""
    return [
        "model=tiny",
        f"model.path={tiny_model_dir}",
        f"experiment.data_dir={gsm8k_dir}",
        f"logs_root={tmp_path / 'logs'}",
        f"runtime.trainer_cmd=[python,{FAKE_TRAINER}]",
        "runtime.needs_gpu=false",
        "runtime.kill_grace_s=5",
        "verl.trainer.total_training_steps=4",
        "verl.trainer.save_freq=2",
        "verl.trainer.test_freq=2",
    ]


# The bundled cluster's request (configs/cluster/slurm_local.yaml, what a user types there), with
# settings a user would not pass, each for the test suite's sake: one CPU per job (three test files
# share the 3 x 8 CPU nodes at once, on a 2-core machine), a 15-minute limit and a 60 s warning (a
# stuck test job ends well inside the suite's time), at most 4 array tasks at once.
SLURM_TEST_CLUSTER = [
    "cluster=slurm_local",
    "cluster.cpus_per_task=1",
    "cluster.mem_gb=1",
    "cluster.timeout_min=15",
    "cluster.signal_delay_s=60",
    "cluster.array_parallelism=4",
]


def run_kit(
    script: str, args: list[str], *, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``launch/<script>`` as a user would; output captured.

    One setting a user would not pass, for the suite's CPU: ``GRPOKIT_VALIDATE_IN_PROCESS=1``
    (unless ``env`` sets it). By default a command forks a validator that imports verl while Hydra
    composes, and kills it unused when verl's verdict on every point is on record
    (grpokit.validate.overlap): about 1 s of CPU spent for nothing per repeated command, on a
    2-core machine whose tests are CPU-bound. The forked path is tested by
    ``tests/unit/test_fast_sweep_path.py`` and by every README command (test_readme_commands.py).
    """
    return subprocess.run(
        [sys.executable, str(REPO / "launch" / script), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "GRPOKIT_VALIDATE_IN_PROCESS": "1", **(env or {})},
        timeout=timeout,
    )


def status_json(run_dir: Path | str) -> dict:
    """``<run_dir>/status.json`` read through its record (grpokit.run_folder.read_status: every key
    checked, a missing file is ``pending``) and given back as the file's JSON object, which the
    cluster tests compare key by key."""
    return read_status(run_dir).to_json()


def wait_final(run_dirs: list[Path], timeout: float, states: set[str] = FINAL) -> list[dict]:
    """Poll the run folders' status.json until each is in ``states`` (pytest fails at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = [status_json(d) for d in run_dirs]
        if all(s.get("state") in states for s in statuses):
            return statuses
        if time.monotonic() > deadline:
            squeue = subprocess.run(["squeue"], capture_output=True, text=True).stdout if shutil.which("squeue") else ""
            pytest.fail(f"points not final after {timeout:.0f} s: {[s.get('state') for s in statuses]}\n{squeue}")
        time.sleep(1.0)


def manifest(sweep_dir: Path) -> dict:
    return json.loads((Path(sweep_dir) / "manifest.json").read_text())


def slurm_job(job_id: str) -> dict[str, str]:
    """``scontrol show job -o <job id>`` (``<array id>_<task id>`` for a task) as a dict of its fields."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)


def set_time_limit(job_id: str, minutes: int) -> None:
    """``scontrol update JobId=<job id> TimeLimit=<minutes>``: a job's (or one array task's) limit."""
    out = subprocess.run(
        ["scontrol", "update", f"JobId={job_id}", f"TimeLimit={minutes}"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr


def bring_time_limit_near(job_id: str, lead_s: float) -> int:
    """Lower a running job's time limit so that Slurm's own ``--signal`` warning (``lead_s`` before
    the limit) is due within about a minute, instead of after the minutes of a submitted limit that
    must first cover the job's start (Ray's start takes 40-80 s on a loaded 2-core host).

    Slurm keeps limits in whole minutes: the new limit is the first whole minute that leaves at least
    ``lead_s - 5`` s, so the time left is then in [lead_s - 5, lead_s + 55) s; Slurm sends the warning at
    its next periodic check (every 30 s) once the time left is at most ``lead_s``: with 0-35 s left
    below the lead, as a submitted ``--time`` gives it. Real Slurm does all of it (a user may lower
    their own job's limit); the limit stays with the job, so a test whose job is requeued puts the
    submitted one back (:func:`set_time_limit`) before the next attempt needs it. Returns the new
    limit (minutes)."""
    from grpokit.slurm.times import parse_time_s

    job = slurm_job(job_id)
    assert job["JobState"] == "RUNNING", job
    elapsed = parse_time_s(job["RunTime"]) or 0.0
    minutes = max(1, math.ceil((elapsed + lead_s - 5) / 60))
    set_time_limit(job_id, minutes)
    return minutes


class _Kit:
    """Helpers for end-to-end tests, handed out by the ``kit`` fixture (tests cannot import conftest)."""

    repo = REPO
    shared = SHARED
    python = sys.executable
    fake_trainer = FAKE_TRAINER
    slurm_cluster = SLURM_TEST_CLUSTER
    final = FINAL
    run = staticmethod(run_kit)
    wait_final = staticmethod(wait_final)
    read_status = staticmethod(status_json)  # the JSON object, checked by the record
    manifest = staticmethod(manifest)
    slurm_job = staticmethod(slurm_job)
    set_time_limit = staticmethod(set_time_limit)
    bring_time_limit_near = staticmethod(bring_time_limit_near)

    @staticmethod
    def env() -> dict[str, str]:
        return dict(os.environ)


def _run_together(script: str, n: int, *args: str, timeout: float = 120) -> list[str]:
    """Run ``n`` separate interpreters of ``python -c script START *args`` and return their stdout
    (stripped); each must exit 0. START (``sys.argv[1]``) is one wall-clock moment, a few seconds
    ahead so that every interpreter has imported the kit, at which the script does its work: the
    processes act together, as n commands typed at once or n jobs on one node would. Interpreters
    of their own, not forks of the pytest worker: a fork copies locks other threads of the worker
    may hold, and a child that inherits a held lock hangs (seen after test_driver_lifecycle)."""
    start = time.time() + 3.0 + 0.3 * n
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(start), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-2000:]
        outs.append(out.strip())
    return outs


@pytest.fixture
def run_together():
    """:func:`_run_together` (tests cannot import conftest)."""
    return _run_together


@pytest.fixture
def kit() -> type[_Kit]:
    return _Kit


@pytest.fixture
def slurm() -> None:
    """Skip unless the local Slurm test cluster is up (``bash slurm/local_cluster.sh up``)."""
    if not slurm_up():
        pytest.skip("no local Slurm cluster (bash slurm/local_cluster.sh up)")


def _bare_point(run_root: Path, index: int = 0, cluster: dict | None = None, sweep_name: str = "s", **fields):
    """A point with only what submission needs: name, folders and Slurm request; other sections empty.

    ``fields`` replace any other PointSpec field (``name``, ``verl_overrides``, ``runtime``,
    ``sidecars``, ``checkpoint_dir``, ...); ``run_dir`` is ``run_root/name`` and ``checkpoint_dir``
    its ``checkpoints`` unless given.
    """
    from grpokit.config.point import PointSpec

    name = fields.pop("name", f"{index:03d}")
    run_dir = Path(run_root) / name
    bare = dict(
        sweep_name=sweep_name,
        index=index,
        name=name,
        run_dir=str(run_dir),
        checkpoint_dir=str(run_dir / "checkpoints"),
        kit_overrides=[],
        swept={},
        verl_overrides=[],
        experiment={},
        model={},
        cluster=cluster or {},
        runtime={},
        sidecars={},
    )
    return PointSpec(**{**bare, **fields})


@pytest.fixture(autouse=True)
def root_logging_restored():
    """The root logger's handlers and level as they were before the test. A command run in-process
    (``sweep.entry``: Hydra's job logging; the driver's job log) may leave a handler on the stream
    pytest captured for that test; a later test's log line would then meet a closed stream
    ("--- Logging error ---" in its stderr). In a real command the process ends with it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers and type(h).__module__ == "logging"]:
        root.removeHandler(handler)  # logging's own stream and file handlers; pytest's capture handlers stay
    root.setLevel(level)


@pytest.fixture
def bare_point():
    """``bare_point(run_root, index=0, cluster=None, sweep_name="s", **fields)``: a minimal PointSpec
    (tests cannot import conftest)."""
    return _bare_point


def _local_sweep(root: Path, completed: str = "reached step 4", failed: str = "trainer exited 3 at step 3") -> list:
    """A two-point local sweep in folder ``root`` as the sweep command leaves it (absolute run folders,
    the claim's submission line, the manifest): 000 completed, 001 failed (resubmittable), with the
    reasons given."""
    from grpokit.run_folder import claim as folder
    from grpokit.run_folder.manifest import write_manifest

    specs = [_bare_point(root, i, {"kind": "local"}, root.name) for i in range(2)]
    with folder.claim(root.parent, root.name, generated=False, resume=False) as c:
        for s in specs:
            Path(s.run_dir).mkdir(parents=True)
            (Path(s.run_dir) / "point.json").write_text(s.to_json())
        write_manifest(root, specs, [None, None], experiment="e", cluster="local", swept_keys=[])
        c.record("new", [s.name for s in specs], [None, None])
    for s, state, reason in zip(specs, ["completed", "failed"], [completed, failed], strict=True):
        attempts = [{"attempt": 1, "start": "2026-01-01T00:00:00+00:00"}]
        (Path(s.run_dir) / "status.json").write_text(
            json.dumps({"state": state, "reason": reason, "attempts": attempts})
        )
    return specs


@pytest.fixture
def local_sweep():
    """``local_sweep(root, completed=..., failed=...) -> specs``: a two-point local sweep, 000 completed
    and 001 failed (:func:`_local_sweep`)."""
    return _local_sweep


def _point_folder(
    sweep: Path,
    index: int,
    state: str,
    *,
    target: int = 4,
    step: int | None = None,
    reason: str = "",
    job_id: str | None = None,
) -> dict:
    """A run folder ``<sweep>/<NNN>_lr-<index>`` as the driver leaves it (docs/run-folder.md: status.json
    with one attempt, ended unless ``state`` is running; point.json), run locally unless ``job_id``;
    returns the point's manifest entry."""
    run = sweep / f"{index:03d}_lr-{index}"
    run.mkdir(parents=True)
    ended = state != "running"
    attempt = {
        "attempt": 1,
        "start": "2026-01-01T00:00:00+00:00",
        "end": "2026-01-01T00:05:00+00:00" if ended else None,
        "ended_by": state if ended else None,
        "elapsed_s": 300.0 if ended else None,
    }
    status = {"state": state, "reason": reason, "target_step": target, "last_step": step, "attempts": [attempt]}
    (run / "status.json").write_text(json.dumps(status))
    (run / "point.json").write_text("{}")
    return {"index": index, "name": run.name, "run_dir": str(run), "swept": {"lr": index}, "job_id": job_id}


def _sweep_manifest(folder: Path, points: list[dict]) -> Path:
    """``folder/manifest.json`` naming ``points`` (:func:`_point_folder`'s entries), swept key ``lr``."""
    (folder / "manifest.json").write_text(json.dumps({"sweep": folder.name, "swept_keys": ["lr"], "points": points}))
    return folder


@pytest.fixture
def point_folder():
    """``point_folder(sweep, index, state, *, target=4, step=None, reason="", job_id=None) -> entry``:
    a point's run folder as the driver leaves it (:func:`_point_folder`)."""
    return _point_folder


@pytest.fixture
def sweep_manifest():
    """``sweep_manifest(folder, entries) -> folder``: the sweep's manifest.json naming those points."""
    return _sweep_manifest


# --- the order the parallel part starts its files in ---------------------------------------------

#: The integration files that run longest, about longest first (each file's tests took 2.5-7.5
#: minutes in a fresh clone's `make test` on the 2-core machine, 2026-12-03).
#: `make test` runs `pytest-xdist --dist loadfile --no-loadscope-reorder`, which hands files to the
#: workers in collection order: started first, a long file no longer becomes the suite's tail
#: (xdist's own reorder puts files with many tests first, and the README test, one test of 6 minutes,
#: last). Only the schedule depends on this list; a file missing from it runs after these.
LONGEST_FIRST = (
    "test_readme_commands.py",
    "test_array_signals_slurm.py",
    "test_preemption_slurm.py",
    "test_chain_slurm.py",
    "test_rehearsal_workloads_slurm.py",  # 4.3 min alone on an idle cluster (2026-12-05)
    "test_outcomes_slurm.py",
    "test_sweep_slurm.py",
    "test_guards_slurm.py",
    "test_runtime_slurm.py",
    "test_halving_slurm.py",
    "test_retry_slurm.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: file order kept within
