"""grpokit.run_folder: atomic writes, the states' enum, the one status reader, the file names."""

from __future__ import annotations

import ast
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpokit import run_folder
from grpokit.run_folder import (
    FINAL_STATES,
    PointState,
    RunFolder,
    StatusFile,
    StatusFileError,
    layout,
    read_status,
    write_json_atomic,
)
from grpokit.run_folder.manifest import read_manifest
from grpokit.run_folder.sweep_reader import load_sweep

REPO = Path(__file__).resolve().parents[2]


# Another process writes large payloads (several MB, many write(2) calls each: a plain open-write
# would be seen half-done by the reader) until it is killed.
WRITER = """
import sys
from grpokit.run_folder import write_json_atomic
for i in range(100_000):
    write_json_atomic(sys.argv[1], {"state": "running", "i": i, "pad": "x" * (2_000_000 + i)})
"""


def test_atomic_write_is_never_seen_partial_by_a_concurrent_reader_nor_left_partial_by_a_kill(tmp_path):
    path = tmp_path / "status.json"
    write_json_atomic(path, {"state": "pending", "i": -1})
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
    seen, deadline = set(), time.monotonic() + 4.0
    while time.monotonic() < deadline and len(seen) < 5:
        seen.add(json.loads(path.read_text())["i"])  # a partial file raises here
    proc.send_signal(signal.SIGKILL)  # mid-write, most likely: the file is the last whole one
    proc.wait()
    assert len(seen) >= 2, "the reader should have seen the writer's progress"
    json.loads(path.read_text())
    assert not [p for p in tmp_path.iterdir() if p.name != "status.json" and not p.name.startswith(".status.json.")]


def test_atomic_write_that_fails_keeps_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "manifest.json"
    write_json_atomic(path, {"points": []})

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_json_atomic(path, {"points": [1, 2, 3]})
    assert json.loads(path.read_text()) == {"points": []}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_atomic_write_gives_the_mode_a_plain_open_would_so_labmates_can_read_the_sweep(tmp_path):
    """mkstemp's 0o600 would follow the file through os.replace: status.json, manifest.json and
    metrics.jsonl readable by their owner only (seen in a newcomer's trial with umask 0022)."""
    plain = tmp_path / "plain.json"
    old = os.umask(0o022)
    try:
        plain.write_text("{}")
        write_json_atomic(tmp_path / "status.json", {"state": "running"})
        os.umask(0o027)
        write_json_atomic(tmp_path / "manifest.json", {"points": []})
    finally:
        os.umask(old)
    assert (tmp_path / "status.json").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "manifest.json").stat().st_mode & 0o777 == 0o640


def test_final_states_are_defined_once_and_match_the_docs():
    assert {"completed", "failed", "cancelled", "skipped_no_gpu", "pruned"} == FINAL_STATES
    assert all(PointState(s).is_final for s in FINAL_STATES)
    assert not any(s.is_final for s in (PointState.PENDING, PointState.RUNNING, PointState.REQUEUED))
    assert PointState.COMPLETED == "completed" and json.dumps(PointState.FAILED) == '"failed"'
    assert run_folder.SUCCESS_STATES < FINAL_STATES
    doc = (REPO / "docs" / "run-folder.md").read_text()
    documented = set(doc.split('{"state": "', 1)[1].split('"', 1)[0].split("|"))
    assert documented == {s.value for s in PointState}


def test_one_reader_for_a_missing_status(tmp_path):
    assert read_status(tmp_path).to_json() == {"state": "pending", "attempts": []}
    assert read_status(tmp_path, pending_if_missing=False) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"state": "running", "attem', "not JSON"),  # a file cut short (copied while written, a full disk)
        ("[1, 2]", "expected the driver's object with a 'state'"),
        ('{"attempts": []}', "expected the driver's object with a 'state'"),
    ],
)
def test_one_reader_for_a_damaged_status_names_the_file_and_the_fix(tmp_path, text, says):
    (tmp_path / "status.json").write_text(text)
    with pytest.raises(StatusFileError) as err:
        read_status(tmp_path)
    message = str(err.value)
    assert str(tmp_path / "status.json") in message and says in message and "move it aside" in message
    assert "\n" not in message
    with pytest.raises(StatusFileError):
        StatusFile(tmp_path)  # the driver refuses it with the same message, not a JSON traceback


def test_the_reports_show_a_point_with_a_damaged_status_as_no_status_and_say_why(tmp_path, caplog):
    runs = [tmp_path / "000_a", tmp_path / "001_b"]
    manifest = {"sweep": "s", "points": [{"index": i, "name": r.name, "run_dir": str(r)} for i, r in enumerate(runs)]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    runs[0].mkdir()
    (runs[0] / "status.json").write_text("{")
    StatusFile(runs[1]).start_attempt(target_step=4, slurm={})
    with caplog.at_level(logging.WARNING):
        sweep = load_sweep(tmp_path)
    assert [p.status for p in sweep.points][0] is None
    assert sweep.points[1].status.state == "running"
    assert str(runs[0] / "status.json") in caplog.text and "not JSON" in caplog.text


def test_a_damaged_manifest_is_one_line_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="pass a sweep folder"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"sweep": "s"')
    with pytest.raises(ValueError, match="manifest.json: not JSON"):
        read_manifest(tmp_path)


def test_status_file_round_trip_through_the_reader(tmp_path):
    status = StatusFile(tmp_path)
    status.start_attempt(target_step=4, slurm={"job_id": "7"})
    status.finish(PointState.COMPLETED, ended_by=run_folder.EndedBy.COMPLETED, exit_code=0, last_step=4)
    data = read_status(tmp_path)
    assert (data.state, data.attempts[0].ended_by, data.last_step) == ("completed", "completed", 4)
    assert StatusFile(tmp_path).state is PointState.COMPLETED


def test_every_file_name_of_the_layout_is_documented_and_paths_come_from_it(tmp_path):
    doc = (REPO / "docs" / "run-folder.md").read_text()
    names = {v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str)}
    assert not [n for n in names if n not in doc]
    run = RunFolder(tmp_path / "000_a")
    assert run.status == tmp_path / "000_a" / "status.json"
    assert run.attempt(2).metrics == tmp_path / "000_a" / "attempts" / "2" / "metrics.jsonl"
    for k in (2, 10, 1):
        run.attempt(k).path.mkdir(parents=True)
    (run.attempts_dir / "notes").mkdir()
    assert [a.number for a in run.attempts()] == [1, 2, 10]


def test_the_package_imports_no_layer_above_it():
    above = (
        "grpokit.submit",
        "grpokit.runtime",
        "grpokit.reports",
        "grpokit.evaluation",
        "grpokit.cli",
        "grpokit.validate",
    )
    for path in (REPO / "src" / "grpokit" / "run_folder").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(above), f"{path.name} imports {node.module}"


def _imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports (``import a.b`` and ``from a.b import c``, function-local ones too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)  # from grpokit import reports
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_submit_and_runtime_import_nothing_from_reports_evaluation_or_cli():
    """Issue 14: no import runs back up the layers; the state word lives in run_folder.point_state."""
    above = ("grpokit.reports", "grpokit.evaluation", "grpokit.cli")
    found = [
        f"{path.relative_to(REPO)} imports {name}"
        for layer in ("submit", "runtime")
        for path in sorted((REPO / "src" / "grpokit" / layer).rglob("*.py"))
        for name in _imported_modules(path)
        if name.startswith(above)
    ]
    assert not found, "\n".join(found)
