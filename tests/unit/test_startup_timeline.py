"""The start-up timeline (grpokit.runtime.startup) read from real log lines.

tests/data/startup/trainer_first.log and trainer_resume.log are excerpts (the marked lines and some
neighbours, cut at 400 characters) of the trainer logs of the H200 full-shape bench at commit
c9bf84e (verl 0.9.1, vLLM 0.24.0, Ray 2.60; the first attempt started 2026-12-01 23:34:44, the
resumed one 23:53:07, both in UTC). Their marks were checked by hand against the whole logs.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from grpokit.runtime import startup

DATA = Path(__file__).resolve().parent.parent / "data" / "startup"


@pytest.fixture(autouse=True)
def _utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the logs' stamps are the GPU host's local time: UTC
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _epoch(*args) -> float:
    return dt.datetime(*args).timestamp()


def test_first_attempt_phases_from_the_driver_and_the_trainer_log(tmp_path: Path) -> None:
    (tmp_path / "trainer.log").write_text((DATA / "trainer_first.log").read_text())
    job_start = _epoch(2026, 12, 1, 23, 34, 44, 400000)
    data = startup.write(tmp_path, job_start, {"ray_ready_s": 12.31, "trainer_launched_s": 12.4})
    assert json.loads((tmp_path / "startup.json").read_text()) == data
    at = {p["phase"]: p["at_s"] for p in data["phases"]}
    took = {p["phase"]: p["took_s"] for p in data["phases"]}
    # driver marks
    assert (at["ray_ready"], at["trainer_launched"]) == (12.3, 12.4)
    assert data["phases"][0]["source"] == "driver"
    # verl's and Ray's stamped lines (sub-second): Connected 23:35:16.023, dataloader 23:36:16.407,
    # create worker group 23:36:19.591, actor and ref 23:37:13.947, checkpoint engine 23:42:03.824
    assert at["verl_import"] == pytest.approx(31.6, abs=0.1)
    assert took["dataset"] == pytest.approx(60.4, abs=0.1)
    assert took["worker_group"] == pytest.approx(3.2, abs=0.1)
    assert took["actor_ref"] == pytest.approx(54.4, abs=0.1)
    # vLLM's (1-s stamps): the rollout server's process (pid 3701) first speaks at 23:37:49 as a
    # bare (pid=3701) line, spawns the engine core at 23:38:27, the API router is up at 23:42:01
    assert at["rollout_spawn"] == pytest.approx(184.6, abs=0.1)
    assert at["engine_start"] == pytest.approx(222.6, abs=0.1)
    assert took["engine_ready"] == pytest.approx(214.0, abs=0.1)
    assert took["weight_sync"] == pytest.approx(2.8, abs=0.1)
    # the first generation request reaches vLLM at 23:42:40
    assert data["first_generation_s"] == pytest.approx(475.6, abs=0.1)
    # without the driver's arrival record the unstamped marks are named, not guessed
    assert data["not_seen"] == ["task_runner", "tokenizer", "engine_compiled"]
    # phases follow each other: the durations add up to the first request's time
    assert sum(took.values()) == pytest.approx(data["first_generation_s"], abs=0.5)
    line = startup.one_line(data)
    assert line.startswith("start-up 476 s to first generation: ray 12 | launch 0 | verl import 19")
    assert "engine up 214" in line and "first request 36" in line


def test_unstamped_lines_take_the_time_the_log_first_held_them(tmp_path: Path) -> None:
    raw = (DATA / "trainer_first.log").read_bytes()
    (tmp_path / "trainer.log").write_bytes(raw)
    job_start = _epoch(2026, 12, 1, 23, 34, 44, 400000)
    ends, pos = [], 0
    for ln in raw.splitlines(keepends=True):
        pos += len(ln)
        ends.append((pos, ln))
    # the driver's polls: the log grew to the end of line i at job start + 100 + i seconds,
    # two lines at a time (a poll sees several lines arrive together)
    arrivals = startup.Arrivals()
    for i, (end, _) in enumerate(ends):
        if i % 2 == 1 or i == len(ends) - 1:
            arrivals.observe(end, job_start + 100 + i)
    arrivals.observe(ends[0][0], job_start)  # not growing: ignored
    data = startup.write(tmp_path, job_start, {"trainer_launched_s": 12.4}, arrivals)
    at = {p["phase"]: p["at_s"] for p in data["phases"]}
    src = {p["phase"]: p["source"] for p in data["phases"]}
    first_task_runner = next(i for i, (_, ln) in enumerate(ends) if b"TaskRunnerV1" in ln)
    first_dataset = next(i for i, (_, ln) in enumerate(ends) if b"Using dataset class" in ln)
    first_graphs = next(i for i, (_, ln) in enumerate(ends) if b"Capturing CUDA graphs" in ln)
    assert at["task_runner"] == pytest.approx(100 + first_task_runner + (1 - first_task_runner % 2))
    assert at["tokenizer"] == pytest.approx(100 + first_dataset + (1 - first_dataset % 2))
    assert at["engine_compiled"] == pytest.approx(100 + first_graphs + (1 - first_graphs % 2))
    assert src["task_runner"] == src["tokenizer"] == src["engine_compiled"] == "arrival"
    assert src["dataset"] == "trainer.log"  # a stamped line keeps its own time
    # the record is kept beside the log, and a later build reads it back
    assert startup.Arrivals.read(tmp_path / "trainer.log.arrivals").sizes == arrivals.sizes
    assert startup.build(tmp_path, job_start, {}).marks["tokenizer"] == job_start + at["tokenizer"]


def test_resumed_attempt_has_its_checkpoint_load_and_a_shorter_engine_start() -> None:
    with (DATA / "trainer_resume.log").open() as fh:
        tl = startup.parse_lines(fh, _epoch(2026, 12, 1, 23, 53, 7, 100000))
    data = tl.to_dict()
    took = {p["phase"]: p["took_s"] for p in data["phases"]}
    # "Resuming from ... global_step_4" 23:57:34.596 -> "all initialize finished" 23:57:40.919
    assert took["checkpoint_load"] == pytest.approx(6.6, abs=0.1)
    assert took["engine_ready"] == pytest.approx(83.0, abs=0.1)  # 23:56:08 -> 23:57:31
    assert data["first_generation_s"] == pytest.approx(310.9, abs=0.1)  # 23:58:18
    assert "ray_ready" in data["not_seen"]  # no driver marks given: named, not guessed


def test_a_log_cut_before_the_engine_names_what_it_did_not_see(tmp_path: Path) -> None:
    lines = (DATA / "trainer_first.log").read_text().splitlines(keepends=True)
    cut = [ln for ln in lines if "vLLMHttpServer" not in ln and "pid=3701" not in ln][:12]
    (tmp_path / "trainer.log").write_text("".join(cut))
    data = startup.write(tmp_path, _epoch(2026, 12, 1, 23, 34, 44), {"trainer_launched_s": 12.4})
    assert data["first_generation_s"] is None
    assert {"rollout_spawn", "engine_ready", "first_generation", "ray_ready"} <= set(data["not_seen"])
    assert startup.one_line(data).startswith("start-up (no generation yet): launch 12 | verl import 20")


@pytest.mark.parametrize(
    ("name", "figures", "engine_s"),
    [
        # cold: vLLM compiles (22.19 s) and its first forward pass JIT-compiles the Triton kernels (48.88 s)
        (
            "first",
            {
                "compile_cache": "miss",
                "weights_s": 0.348833,
                "compile_s": 22.19,
                "profile_run_s": 48.88,
                "kv_cache_gib": 39.65,
                "cuda_graphs_s": 2.0,
                "init_engine_s": 81.65,
            },
            109,  # 07:33:27 engine core spawned -> 07:35:16 API router up
        ),
        # resumed with the kit's caches: vLLM loads its compiled graph, Triton's kernels are cached
        (
            "resume",
            {
                "compile_cache": "hit",
                "weights_s": 0.354103,
                "compile_s": 2.27,
                "profile_run_s": 0.26,
                "kv_cache_gib": 39.71,
                "cuda_graphs_s": 1.0,
                "init_engine_s": 5.34,
            },
            None,
        ),
        # resumed with VLLM_DISABLE_COMPILE_CACHE=1 (verl's default): compiled again, 13.17 s
        (
            "resume_off",
            {
                "compile_cache": "off",
                "weights_s": 0.293547,
                "compile_s": 13.17,
                "kv_cache_gib": 39.65,
                "cuda_graphs_s": 1.0,
                "init_engine_s": 16.8,
            },
            None,
        ),
    ],
)
def test_vllm_info_lines_give_the_engines_own_figures(name, figures, engine_s) -> None:
    # excerpts of the H200 bench at bcffbfa (2026-12-03; VLLM_LOGGING_LEVEL=INFO set by the kit)
    with (DATA / f"engine_{name}.log").open("rb") as fh:
        tl = startup.parse_lines(fh, _epoch(2026, 12, 3, 7, 31, 46))
    assert tl.engine == figures
    if engine_s is not None:
        assert tl.marks["engine_ready"] - tl.marks["engine_start"] == engine_s
    assert f"[compile cache {figures['compile_cache']}]" in startup.one_line(tl.to_dict())


def test_a_vllm_stamp_without_year_is_placed_next_to_the_job_start() -> None:
    # a job started on 31 December, an engine line stamped 1 January: the year after
    t = startup.line_time("INFO 01-01 00:00:05 [core.py:1] x", 2026, 12)
    assert t == _epoch(2027, 1, 1, 0, 0, 5)
    assert startup.line_time("INFO 12-31 23:59:59 [core.py:1] x", 2027, 1) == _epoch(2026, 12, 31, 23, 59, 59)
    assert startup.line_time("no stamp here", 2026, 12) is None


def test_the_kit_asks_for_vllms_info_lines_unless_the_user_set_a_level() -> None:
    assert startup.environment({}) == {"VLLM_LOGGING_LEVEL": "INFO"}
    assert startup.environment({"VLLM_LOGGING_LEVEL": "DEBUG"}) == {}


def test_status_shows_the_latest_attempts_start_up(tmp_path: Path) -> None:
    from rich.console import Console

    from grpokit.reports.status_table import render_table, row_json, status_row
    from grpokit.run_folder.manifest import SweepManifest
    from grpokit.run_folder.status_record import PointStatus
    from grpokit.run_folder.sweep_reader import Point, Sweep

    run = tmp_path / "000_a"
    for k, first in ((1, 228.0), (2, 146.0)):  # attempt 2 resumed: its own timeline is shown
        (run / "attempts" / str(k)).mkdir(parents=True)
        (run / "attempts" / str(k) / "startup.json").write_text(
            json.dumps(
                {
                    "first_generation_s": first,
                    "phases": [{"phase": "ray_ready", "at_s": 6.0, "took_s": 6.0}],
                    "engine": {"compile_cache": "hit" if k == 2 else "miss"},
                }
            )
        )
    started = "2026-01-01T00:00:00+00:00"
    status = {"state": "running", "target_step": 4, "attempts": [{"attempt": k, "start": started} for k in (1, 2)]}
    point = Point(index=0, name="000_a", run_dir=run, status=PointStatus.from_json(status))
    row = status_row(point, None)
    data = row_json(row)
    assert data["startup_s"] == 146.0
    assert data["startup"] == "start-up 146 s to first generation: ray 6 [compile cache hit]"
    sweep = Sweep(path=tmp_path, manifest=SweepManifest(points=[], sweep="s"), swept_keys=[], points=[point])
    console = Console(width=200, record=True)
    console.print(render_table(sweep, [row]))
    assert "146 s" in console.export_text()
    # report: a startup_s column and one line per point in report.md
    from grpokit.reports.report_table import collect_report, write_tables

    report = collect_report(sweep, ask_slurm=False)
    assert report.table.loc[0, "startup_s"] == 146.0
    _, md = write_tables(report, tmp_path / "report")
    assert "- 000_a: start-up 146 s to first generation: ray 6 [compile cache hit]" in md.read_text()
