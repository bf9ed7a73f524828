"""status.py / report.py tables against synthetic sweep folders written per docs/run-folder.md."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import pytest
from PIL import Image
from rich.console import Console

from grpokit.reports import report_table, status_table
from grpokit.reports.report_table import collect_report, write_tables
from grpokit.reports.status_table import collect_rows, render_table
from grpokit.run_folder.sweep_reader import load_sweep
from grpokit.slurm.job_states import SlurmJobState

REPO = Path(__file__).resolve().parents[2]
ACC = "val-core/openai/gsm8k/acc/mean@1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.isoformat()


def metrics_line(step: int, scale: float, val: bool) -> dict:
    data = {
        "critic/rewards/mean": scale * step / 10,
        "critic/score/mean": scale * step / 10,
        "response_length/mean": 100.0 + step,
        "response_length/clip_ratio": 0.01 * step,
        "timing_s/step": 10.0,
        "timing_s/gen": 6.0,
        "timing_s/update_actor": 3.0,
        "perf/total_num_tokens": 5000.0,
        "perf/throughput": 250.0,
        "training/global_step": step,
    }
    if val:
        data[ACC] = scale * step / 20
    return {"step": step, "data": data}


def write_point(
    sweep: Path,
    index: int,
    swept: dict,
    attempts: list[tuple[int, int, float]],
    state: str,
    target: int,
    gpus: int = 2,
    ended_by: list[str] | None = None,
    job_id: str | None = None,
    test_freq: int = 2,
) -> dict:
    """A run folder: status.json plus attempts/<k>/metrics.jsonl; returns the manifest entry.

    attempts: (first_step, last_step, value scale) per attempt, each lasting 600 s.
    """
    slug = "_".join(f"{k.split('.')[-1]}{v}" for k, v in swept.items())
    name = f"{index:03d}_{slug}"
    run = sweep / name
    entries = []
    for k, (first, last, scale) in enumerate(attempts, start=1):
        folder = run / "attempts" / str(k)
        folder.mkdir(parents=True)
        lines = [metrics_line(s, scale, val=(s % test_freq == 0)) for s in range(first, last + 1)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        start = T0 + timedelta(seconds=1000 * k)
        entries.append(
            {
                "attempt": k,
                "start": iso(start),
                "end": iso(start + timedelta(seconds=600)),
                "ended_by": (ended_by or ["preempted"] * (len(attempts) - 1) + ["completed"])[k - 1],
                "slurm_state": "",
                "exit_code": 0,
                "first_step": first,
                "last_step": last,
                "elapsed_s": 600.0,
            }
        )
    status = {
        "state": state,
        "reason": "test",
        "exit_code": 0,
        "target_step": target,
        "last_step": attempts[-1][1] if attempts else 0,
        "slurm": {
            "job_id": job_id,
            "array_job_id": None,
            "array_task_id": None,
            "restart_count": 0,
            "nodelist": "node1",
            "gpus": gpus,
        },
        "attempts": entries,
        "updated": iso(T0),
    }
    run.mkdir(parents=True, exist_ok=True)
    (run / "status.json").write_text(json.dumps(status))
    return {
        "index": index,
        "name": name,
        "overrides": [f"{k}={v}" for k, v in swept.items()],
        "swept": swept,
        "run_dir": str(run),
        "job_id": job_id,
        "array_job_id": None,
        "array_task_id": None,
        "submitted": iso(T0),
    }


LR, KL = "actor_rollout_ref.actor.optim.lr", "algorithm.kl_ctrl.kl_coef"


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    sweep = tmp_path / "logs" / "demo"
    sweep.mkdir(parents=True)
    points = [
        # Completed in one attempt.
        write_point(sweep, 0, {LR: 1e-6, KL: 0.0}, [(1, 10, 1.0)], "completed", 10),
        # Preempted at step 7, resumed from the step-4 checkpoint: steps 5-7 re-run with scale 2.
        write_point(sweep, 1, {LR: 1e-6, KL: 0.1}, [(1, 7, 1.0), (5, 10, 2.0)], "completed", 10),
        # Three attempts, failed in the last.
        write_point(
            sweep,
            2,
            {LR: 2e-6, KL: 0.0},
            [(1, 4, 1.0), (3, 6, 3.0), (5, 8, 0.5)],
            "failed",
            10,
            ended_by=["timeout", "preempted", "failed"],
        ),
        # Queued, never started.
        write_point(sweep, 3, {LR: 2e-6, KL: 0.1}, [], "pending", 10, job_id="999999"),
    ]
    manifest = {
        "sweep": "demo",
        "created": iso(T0),
        "experiment": "gsm8k_grpo",
        "cluster": "local",
        "swept_keys": [LR, KL],
        "points": points,
    }
    (sweep / "manifest.json").write_text(json.dumps(manifest))
    return sweep


def expected_merged(attempts: list[tuple[int, int, float]]) -> dict[int, tuple[int, float]]:
    """step -> (attempt, scale) with the latest attempt winning: the reference the tables must match."""
    out = {}
    for k, (first, last, scale) in enumerate(attempts, start=1):
        for s in range(first, last + 1):
            out[s] = (k, scale)
    return out


def test_report_values_match_metrics_files(sweep_dir):
    rep = collect_report(load_sweep(sweep_dir), ask_slurm=False)
    t = rep.table.set_index("index")
    src = "openai/gsm8k"
    # Point 1: final step 10 from attempt 2 (scale 2).
    assert t.loc[1, "last_step"] == 10
    assert t.loc[1, "final_reward_mean"] == pytest.approx(2.0 * 10 / 10)
    assert t.loc[1, f"final_acc:{src}"] == pytest.approx(2.0 * 10 / 20)
    assert t.loc[1, f"best_acc:{src}"] == pytest.approx(1.0)
    # Point 2: steps 3-4 come from attempt 2, 5-8 from attempt 3 (scale 0.5); the best accuracy is at
    # step 6? No: step 6 was re-run by attempt 3 (0.5*6/20); the best is step 4 of attempt 2 (3*4/20).
    merged = expected_merged([(1, 4, 1.0), (3, 6, 3.0), (5, 8, 0.5)])
    accs = {s: sc * s / 20 for s, (_, sc) in merged.items() if s % 2 == 0}
    best_step = max(accs, key=accs.get)
    assert t.loc[2, f"best_acc:{src}"] == pytest.approx(accs[best_step])
    assert t.loc[2, f"best_acc_step:{src}"] == best_step == 4
    assert t.loc[2, f"final_acc:{src}"] == pytest.approx(0.5 * 8 / 20)
    assert t.loc[2, "final_response_length"] == pytest.approx(108.0)
    assert t.loc[2, "final_clip_ratio"] == pytest.approx(0.08)
    assert t.loc[2, "mean_step_s"] == pytest.approx(10.0)
    assert t.loc[2, "mean_gen_s"] == pytest.approx(6.0)
    assert t.loc[2, "tokens_per_s"] == pytest.approx(500.0)
    assert t.loc[2, "throughput_per_gpu"] == pytest.approx(250.0)
    # Attempts and GPU hours: 3 attempts x 600 s x 2 GPUs.
    assert t.loc[2, "attempts"] == 3
    assert t.loc[2, "gpu_hours"] == pytest.approx(3 * 600 * 2 / 3600)
    assert t.loc[2, "state"] == "failed"
    assert t.loc[1, "state"] == "completed" and t.loc[1, "attempts"] == 2
    # Point 3 never ran.
    assert t.loc[3, "state"] == "queued" and t.loc[3, "attempts"] == 0 and math.isnan(t.loc[3, "last_step"])
    assert t.loc[3, "gpu_hours"] == 0.0
    # Swept values are columns.
    assert t.loc[2, LR] == 2e-6 and t.loc[1, KL] == 0.1
    # Curves hold the merged series.
    c = rep.curves[2].set_index("step")
    assert c.loc[6, "reward"] == pytest.approx(0.5 * 6 / 10)
    assert c.loc[4, "reward"] == pytest.approx(3.0 * 4 / 10)


def test_report_tables_written(sweep_dir, tmp_path):
    rep = collect_report(load_sweep(sweep_dir), ask_slurm=False)
    csv_path, md_path = write_tables(rep, tmp_path / "out")
    csv = pd.read_csv(csv_path)
    assert len(csv) == 4 and csv.loc[csv["index"] == 1, "final_reward_mean"].item() == pytest.approx(2.0)
    md = md_path.read_text()
    assert md.startswith("# Sweep demo")
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in md.splitlines() if line.startswith("|")]
    header, body = rows[0], rows[2:]
    assert len(body) == 4
    by_index = {r[header.index("index")]: dict(zip(header, r, strict=True)) for r in body}
    assert by_index["1"]["final_reward_mean"] == "2"
    assert by_index["2"]["final_acc:openai/gsm8k"] == "0.2"
    assert by_index["3"]["job_id"] == "999999" and by_index["3"]["final_reward_mean"] == ""


def load_cli(name: str):
    """The command's module (grpokit.cli), as ``grpokit <command>`` runs it."""
    return importlib.import_module(f"grpokit.cli.{name}")


def test_report_cli_writes_plots_that_open(sweep_dir, capsys):
    report = load_cli("report")
    assert report.main([str(sweep_dir), "--no-slurm"]) == 0
    out = capsys.readouterr().out
    assert f"tensorboard --logdir {sweep_dir.resolve()}" in out
    curves, heat = sweep_dir / "report" / "curves.png", sweep_dir / "report" / "heatmap.png"
    for png in (curves, heat):
        img = mpimg.imread(png)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        with Image.open(png) as im:
            im.verify()
            assert im.format == "PNG"
    # The heatmap is not a blank canvas: several colours are drawn.
    assert len({tuple(px) for px in mpimg.imread(heat).reshape(-1, 4)[::97]}) > 10


def test_heatmap_frame_values(sweep_dir):
    from grpokit.reports.plots import heatmap_frame

    rep = collect_report(load_sweep(sweep_dir), ask_slurm=False)
    grid = heatmap_frame(rep.table, LR, KL, "final_acc:openai/gsm8k")
    assert grid.loc[0.1, 1e-6] == pytest.approx(1.0)
    assert grid.loc[0.0, 2e-6] == pytest.approx(0.2)
    assert math.isnan(grid.loc[0.1, 2e-6])  # the queued point has no accuracy yet
    with pytest.raises(ValueError, match="no column"):
        heatmap_frame(rep.table, "nope", KL, "final_acc:openai/gsm8k")


def test_report_cli_rejects_unknown_heatmap_axis(sweep_dir, capsys):
    report = load_cli("report")
    assert report.main([str(sweep_dir), "--no-slurm", "--heatmap", LR, "trainer.nope"]) == 2
    assert "not swept keys" in capsys.readouterr().err


def test_report_cli_on_a_run_folder_explains(sweep_dir, capsys):
    report = load_cli("report")
    assert report.main([str(sweep_dir / "000_lr1e-06_kl_coef0.0"), "--no-slurm"]) == 2
    assert "pass a sweep folder" in capsys.readouterr().err


def test_status_rows_match_files(sweep_dir, monkeypatch):
    monkeypatch.setattr(status_table, "job_states", lambda ids: {})
    rows = {r.index: r for r in collect_rows(load_sweep(sweep_dir))}
    assert rows[1].step == 10 and rows[1].target_step == 10 and rows[1].attempts == 2
    assert rows[1].last_reward == pytest.approx(2.0) and rows[1].val_acc == pytest.approx(1.0)
    assert rows[1].fraction == 1.0 and rows[1].elapsed_s == 1200.0
    assert rows[2].step == 8 and rows[2].fraction == pytest.approx(0.8) and rows[2].state == "failed"
    assert rows[2].last_reward == pytest.approx(0.5 * 8 / 10)
    assert rows[3].state == "queued" and rows[3].step == 0 and rows[3].attempts == 0


def test_status_prefers_live_slurm_state(sweep_dir, monkeypatch):
    live = {"999999": SlurmJobState("999999", "RUNNING", "squeue", elapsed_s=42.0)}
    monkeypatch.setattr(status_table, "job_states", lambda ids: {j: live[j] for j in ids if j in live})
    rows = {r.index: r for r in collect_rows(load_sweep(sweep_dir))}
    assert rows[3].state == "running" and rows[3].elapsed_s == 42.0


def test_status_table_renders(sweep_dir, monkeypatch):
    monkeypatch.setattr(status_table, "job_states", lambda ids: {})
    sweep = load_sweep(sweep_dir)
    console = Console(width=200, record=True)
    console.print(render_table(sweep, collect_rows(sweep)))
    text = console.export_text()
    assert "sweep demo (4 points)" in text
    assert "10/10" in text and "8/10" in text and "queued" in text and "00:30:00" in text


def test_status_cli_real_slurm_or_none(sweep_dir, capsys):
    # Runs the real lookup: with or without a cluster the command must answer.
    status = load_cli("status")
    assert status.main([str(sweep_dir), "--width", "220"]) == 0
    assert "sweep demo" in capsys.readouterr().out


def test_gpu_hours_of_running_attempt_uses_slurm_runtime(sweep_dir):
    from grpokit.reports.summary import gpu_hours
    from grpokit.run_folder.status_record import Attempt

    sweep = load_sweep(sweep_dir)
    p = sweep.points[0]
    running = Attempt.from_json({"attempt": 2, "start": iso(T0), "end": None, "elapsed_s": None})
    p.status = dataclasses.replace(p.status, attempts=(*p.status.attempts, running))
    slurm = SlurmJobState("1", "RUNNING", "squeue", elapsed_s=1800.0)
    assert gpu_hours(p, slurm) == pytest.approx((600 + 1800) * 2 / 3600)
    # Without Slurm's answer, now - start counts.
    assert gpu_hours(p, None, now=T0 + timedelta(seconds=3600)) == pytest.approx((600 + 3600) * 2 / 3600)


def test_report_uses_slurm_when_asked(sweep_dir, monkeypatch):
    monkeypatch.setattr(report_table, "job_states", lambda ids: {"999999": SlurmJobState("999999", "RUNNING", "x")})
    t = collect_report(load_sweep(sweep_dir)).table.set_index("index")
    assert t.loc[3, "state"] == "running"


# --- report figures: curves at sweep scale, titles inside the figure, the rehearsal mark, empty cells


def write_manifest(sweep: Path, points: list[dict], swept_keys: list[str], **extra) -> Path:
    manifest = {
        "sweep": sweep.name,
        "created": iso(T0),
        "experiment": "gsm8k_grpo",
        "cluster": "local",
        "swept_keys": swept_keys,
        "points": points,
        **extra,
    }
    (sweep / "manifest.json").write_text(json.dumps(manifest))
    return sweep


def legend_texts(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def test_curves_of_a_1000_point_sweep_draw_the_best_five_and_a_band(tmp_path):
    import random
    import time

    import matplotlib.collections as mcoll
    import matplotlib.pyplot as plt

    from grpokit.reports.plots import curves_figure

    sweep = tmp_path / "logs" / "wide"
    sweep.mkdir(parents=True)
    rng = random.Random(0)
    scales = [round(0.5 + rng.random(), 6) for _ in range(1000)]
    points = [
        write_point(
            sweep, i, {LR: f"{i % 40 + 1}e-7", KL: round(i // 40 * 0.01, 2)}, [(1, 10, scales[i])], "completed", 10
        )
        for i in range(1000)
    ]
    rep = collect_report(load_sweep(write_manifest(sweep, points, [LR, KL])), ask_slurm=False)
    t = time.perf_counter()
    fig = curves_figure(rep)
    fig.savefig(tmp_path / "curves.png", dpi=100)
    seconds = time.perf_counter() - t
    ax_r, ax_a = fig.axes
    # final_acc at step 10 is scale / 2: the five largest scales are the five labelled lines, best first.
    best = sorted(range(1000), key=lambda i: -scales[i])[:5]
    labels = legend_texts(ax_r)
    assert len(labels) == 7, labels  # 5 points + the median and the band of the other 995
    for rank, i in enumerate(best):
        assert labels[rank].startswith(f"#{rank + 1} lr={i % 40 + 1}e-7, kl_coef={round(i // 40 * 0.01, 2)} ")
    assert labels[5:] == ["other 995 points: 10-90 percentile", "other 995 points: median"]
    assert ax_r.get_legend().get_title().get_text() == "best 5 by final_acc:openai/gsm8k"
    for ax in (ax_r, ax_a):  # per panel: 5 lines + 1 median line, 1 shaded band; not 1,000 lines
        assert len(ax.lines) == 6
        assert len([c for c in ax.collections if isinstance(c, mcoll.PolyCollection)]) == 1
    # The band holds the 10-90 percentile of the others at each step: at step 10 the reward is the scale.
    rest = sorted(scales[i] for i in range(1000) if i not in best)
    lo, hi = ax_r.collections[0].get_paths()[0].get_extents().intervaly
    assert lo == pytest.approx(float(pd.Series(rest).quantile(0.1)) * 0.1, rel=0.05)  # step 1: scale/10
    assert hi == pytest.approx(float(pd.Series(rest).quantile(0.9)), rel=0.05)  # step 10: scale
    assert seconds < 20, f"curves of 1000 points took {seconds:.1f} s"
    plt.close(fig)


def test_curves_of_a_small_sweep_label_every_line(sweep_dir):
    import matplotlib.pyplot as plt

    from grpokit.reports.plots import curves_figure

    rep = collect_report(load_sweep(sweep_dir), ask_slurm=False)
    fig = curves_figure(rep)
    ax_r, ax_a = fig.axes
    drawn = [p.name for p in load_sweep(sweep_dir).points[:3]]  # the queued point has no curve yet
    assert legend_texts(ax_r) == drawn
    assert len(ax_r.lines) == len(ax_a.lines) == 3 and not ax_r.collections
    plt.close(fig)


def rehearsal_2x2(tmp_path: Path, name: str = "rehearse_lr_kl_2x2") -> Path:
    """The sweep_dir fixture's four points as a rehearsal, point 3 cancelled before it started."""
    sweep = tmp_path / "logs" / name
    sweep.mkdir(parents=True)
    points = [
        write_point(sweep, 0, {LR: 1e-6, KL: 0.0}, [(1, 10, 1.0)], "completed", 10),
        write_point(sweep, 1, {LR: 1e-6, KL: 0.1}, [(1, 7, 1.0), (5, 10, 2.0)], "completed", 10),
        write_point(sweep, 2, {LR: 2e-6, KL: 0.0}, [(1, 4, 1.0), (3, 8, 3.0)], "failed", 10),
        write_point(sweep, 3, {LR: 2e-6, KL: 0.1}, [], "cancelled", 10),
    ]
    return write_manifest(sweep, points, [LR, KL], rehearsal=True)


def drawn_texts(fig) -> list:
    """The figure's words a reader must see whole: titles, axis labels, texts, legends (not tick
    labels, which matplotlib keeps, undrawn, beyond the axes' limits)."""
    texts = list(fig.texts)
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        if ax.get_legend() is not None:
            texts += [ax.get_legend().get_title(), *ax.get_legend().get_texts()]
    return [t for t in texts if t.get_visible() and t.get_text()]


def test_every_report_figure_keeps_its_title_inside_and_carries_the_rehearsal_mark(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    sweep = rehearsal_2x2(tmp_path)
    saved: dict[str, list[str]] = {}
    original = Figure.savefig

    def savefig(fig, path, *args, **kwargs):
        original(fig, path, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        whole = fig.bbox
        outside = []
        for text in drawn_texts(fig):
            box = text.get_window_extent(renderer)
            if box.x0 < whole.x0 - 0.5 or box.x1 > whole.x1 + 0.5 or box.y0 < whole.y0 - 0.5 or box.y1 > whole.y1 + 0.5:
                outside.append(text.get_text())
        marks = [t.get_text() for t in drawn_texts(fig) if "REHEARSAL" in t.get_text()]
        assert not outside, f"{Path(path).name}: text beyond the figure's edges: {outside}"
        saved[Path(path).name] = marks

    monkeypatch.setattr(Figure, "savefig", savefig)
    paths = load_cli("report").run(sweep, ask_slurm=False)
    written = {p.name for p in (sweep / "report").glob("*.png")}
    assert written == {"curves.png", "heatmap.png"} and set(saved) == written
    assert {p.name for p in paths.values() if p is not None and p.suffix == ".png"} == written
    for name, marks in saved.items():
        assert marks and marks[0].startswith("REHEARSAL (made-up metrics)"), (name, marks)


def test_heatmap_title_is_wrapped_to_fit_and_a_cancelled_cell_says_so(tmp_path):
    import matplotlib.pyplot as plt

    from grpokit.reports.figure_text import inside_figure
    from grpokit.reports.plots import heatmap_figure

    # A sweep name with no spaces, long enough that the title must be wrapped and words broken.
    sweep = rehearsal_2x2(tmp_path, name="gsm8k_grpo_qwen3_rehearse_learning_rate_by_kl_coef_2x2_try3")
    rep = collect_report(load_sweep(sweep), ask_slurm=False)
    fig = heatmap_figure(rep, LR, KL)
    ax = fig.axes[0]
    title = ax.title
    assert inside_figure(fig, title) and "\n" in title.get_text()
    assert title.get_text().startswith("REHEARSAL (made-up metrics):")
    cells = [t.get_text() for t in ax.texts]
    assert "cancelled" in cells  # point 3's cell (lr 2e-6, kl 0.1): no value, its state instead of a blank
    assert len(cells) == 4
    plt.close(fig)


def test_a_curves_panel_without_data_says_so(tmp_path):
    import matplotlib.pyplot as plt

    from grpokit.reports.plots import curves_figure

    sweep = tmp_path / "logs" / "fresh"
    sweep.mkdir(parents=True)
    points = [write_point(sweep, i, {LR: lr}, [], "pending", 10, job_id=f"77_{i}") for i, lr in enumerate((1e-6, 2e-6))]
    rep = collect_report(load_sweep(write_manifest(sweep, points, [LR])), ask_slurm=False)
    fig = curves_figure(rep)
    for ax in fig.axes:
        assert not ax.lines
        assert [t.get_text().splitlines()[0] for t in ax.texts] == ["no data yet"]
    plt.close(fig)


# --- the sweep's GPU hours in report.md


def test_report_md_states_the_sweeps_gpu_hours(sweep_dir, tmp_path):
    rep = collect_report(load_sweep(sweep_dir), ask_slurm=False)
    _, md_path = write_tables(rep, tmp_path / "out")
    md = md_path.read_text()
    # 600 s attempts on 2 GPUs: point 0 one attempt, point 1 two, point 2 three, point 3 none = 6 x 600 x 2 s.
    assert "**GPU hours: 2.00** (sum over the 4 points and their attempts that held GPUs for training" in md
    assert "elapsed x GPUs" in md and "not counted" not in md
    assert md.index("GPU hours") < md.index("| index")  # stated above the table


def test_gpu_hours_count_every_node_and_say_what_is_unknown(sweep_dir, tmp_path):
    # Point 0 ran on two nodes (the driver saw its own node's 2 GPUs): 600 s x 4 GPUs.
    status = json.loads((sweep_dir / "000_lr1e-06_kl_coef0.0" / "status.json").read_text())
    status["slurm"]["nodelist"] = "gpu[07-08]"
    (sweep_dir / "000_lr1e-06_kl_coef0.0" / "status.json").write_text(json.dumps(status))
    # Point 2 ran outside Slurm: no GPU count recorded.
    status = json.loads((sweep_dir / "002_lr2e-06_kl_coef0.0" / "status.json").read_text())
    status["slurm"] = {}
    (sweep_dir / "002_lr2e-06_kl_coef0.0" / "status.json").write_text(json.dumps(status))
    rep = collect_report(load_sweep(sweep_dir), ask_slurm=False)
    t = rep.table.set_index("index")
    assert t.loc[0, "gpu_hours"] == pytest.approx(600 * 4 / 3600)
    assert math.isnan(t.loc[2, "gpu_hours"])
    md = write_tables(rep, tmp_path / "out")[1].read_text()
    total = 600 * 4 / 3600 + 2 * 600 * 2 / 3600
    assert f"**GPU hours: {total:.2f}**" in md
    assert "1 point without a recorded GPU count (status.json's slurm.gpus) not counted" in md


@pytest.mark.parametrize(
    "nodelist, count",
    [("node1", 1), ("node[1-3,7]", 4), ("gpu[01-02],cpu5", 3), ("rack[1-2]-n[1-4]", 8), ("n[1-2],m[10-12]", 5)],
)
def test_node_count_reads_slurm_host_lists(nodelist, count):
    import shutil
    import subprocess

    from grpokit.slurm.nodes import node_count

    assert node_count(nodelist) == count
    if shutil.which("scontrol"):  # Slurm's own expansion agrees (local, no controller asked)
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
        assert len(out.stdout.split()) == count


@pytest.mark.parametrize("nodelist", [None, "", "n[1-2", "n[3-1]", "a,,b", "n[x]"])
def test_node_count_of_a_list_it_cannot_read_is_none(nodelist):
    from grpokit.slurm.nodes import node_count

    assert node_count(nodelist) is None


# --- the pure parts of the figures


def test_curve_plan_ranks_by_the_drawn_accuracy_and_keeps_small_sweeps_whole():
    from grpokit.reports.curve_bands import best_points, plan_curves, ranking_column

    nan = float("nan")
    table = pd.DataFrame(
        {
            "index": list(range(10)),
            "final_acc:a": [0.1, 0.9, nan, 0.5, 0.9, 0.2, 0.3, 0.4, 0.6, 0.7],
            "final_acc:b": [1.0] * 10,
            "final_reward_mean": [0.0] * 10,
        }
    )
    assert ranking_column(table, "val-core/a/acc/mean@1") == "final_acc:a"
    assert ranking_column(table, "val-core/b/acc/mean@1") == "final_acc:b"
    assert ranking_column(table[["index", "final_reward_mean"]]) == "final_reward_mean"
    assert best_points(table, "final_acc:a", 3) == [1, 4, 9]  # the tie at 0.9 goes to the lower index
    assert 2 not in best_points(table, "final_acc:a", 10)  # no value: never among the best
    plan = plan_curves(table, list(range(10)), "val-core/a/acc/mean@1")
    assert plan.labelled == [1, 4, 9, 8, 3] and plan.banded == [0, 2, 5, 6, 7] and plan.metric == "final_acc:a"
    small = plan_curves(table, list(range(8)), "val-core/a/acc/mean@1")
    assert small.labelled == list(range(8)) and small.banded == [] and small.metric is None


def test_band_frame_takes_each_step_over_the_points_that_logged_it():
    from grpokit.reports.curve_bands import band_frame

    a = pd.Series([1.0, 2.0, 3.0], index=[1, 2, 3])
    b = pd.Series([3.0, float("nan")], index=[1, 2])  # step 2 not logged, step 3 never reached
    band = band_frame([a, b, pd.Series(dtype=float)], band=(0.0, 100.0)).set_index("step")
    assert list(band.index) == [1, 2, 3] and list(band["n"]) == [2, 1, 1]
    assert band.loc[1, "median"] == 2.0 and band.loc[1, "lo"] == 1.0 and band.loc[1, "hi"] == 3.0
    assert band.loc[3, "median"] == 3.0
    assert band_frame([]).empty


def test_fit_title_breaks_a_title_without_spaces_until_it_fits():
    import matplotlib.pyplot as plt

    from grpokit.reports.figure_text import fit_title, inside_figure

    fig, ax = plt.subplots(figsize=(3, 2))
    title = ax.set_title("REHEARSAL (made-up metrics): " + "x" * 120)
    assert not inside_figure(fig, title)
    assert fit_title(fig, title, fig.tight_layout) and inside_figure(fig, title)
    assert title.get_text().replace("\n", "").replace(" ", "") == ("REHEARSAL(made-upmetrics):" + "x" * 120)
    plt.close(fig)
