"""launch/prepare_data.py on bad input: every malformed row named (file, line, field, fix), empty
input refused, nothing written unless both splits succeed, and a manifest of what was written.

The command runs as a user runs it (a subprocess of the real script); its input files are made
here from real GSM8K rows (../shared/data/gsm8k) and real NLU CSVs (../shared/data/nlu).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("GRPOKIT_SHARED", REPO.parent / "shared"))
GSM8K = SHARED / "data" / "gsm8k"
NLU = SHARED / "data" / "nlu" / "kfold1"


def prepare(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "launch" / "prepare_data.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=170,
    )


def real_lines(split: str, n: int) -> list[bytes]:
    with open(GSM8K / f"{split}.jsonl", "rb") as f:
        return [next(f) for _ in range(n)]


def gsm8k_source(tmp_path: Path, train_extra: bytes = b"", test_extra: bytes = b"", name: str = "src") -> Path:
    src = tmp_path / name
    src.mkdir()
    (src / "train.jsonl").write_bytes(b"".join(real_lines("train", 6)) + train_extra)
    (src / "test.jsonl").write_bytes(b"".join(real_lines("test", 3)) + test_extra)
    return src


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_state(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): sha(p) for p in sorted(path.rglob("*")) if p.is_file()}


def test_gsm8k_names_every_malformed_row_and_writes_nothing(tmp_path):
    bad = (
        b'{"question": "How many?", "answer": "She has 3 apples."}\n'  # line 7: no ####
        b'{"question": "How many?"}\n'  # line 8: no answer
        b'{"question": "How many?", "answer": "so\\n#### seven"}\n'  # line 9: not a number
        b'{"question": "How many?", "answer": "so\\n#### 7"\n'  # line 10: bad JSON
        b'{"question": "caf\xe9", "answer": "#### 1"}\n'  # line 11: Latin-1 byte
        b'["question", "answer"]\n'  # line 12: not an object
        b'{"answer": "#### 2"}\n'  # line 13: no question
    )
    src = gsm8k_source(tmp_path, train_extra=bad)
    out = tmp_path / "out"
    res = prepare("gsm8k", "--source", src, "--out", out)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[0] == f"prepare_data.py gsm8k: 7 problem(s) in the input; nothing was written to {out}"
    train = src / "train.jsonl"
    expected = [
        (7, "field 'answer': no '####'", "fix: end the answer with a line '#### <final number>'"),
        (8, "field 'answer': missing", 'fix: add "answer"'),
        (9, "field 'answer': 'seven' after '####' is not a number", "fix: put the final number after '####'"),
        (10, "not JSON (Expecting ',' delimiter", "fix: one JSON object per line"),
        (11, "not UTF-8 (byte 0xe9 at column 18)", "fix: save the file as UTF-8"),
        (12, "a JSON list, not an object", "fix: one JSON object per line"),
        (13, "field 'question': missing", 'fix: add "question"'),
    ]
    assert len(lines) == 1 + len(expected)
    for line, (number, what, fix) in zip(lines[1:], expected, strict=True):
        assert line.startswith(f"{train}:{number}: {what}"), line
        assert fix in line, line
    assert not out.exists()
    assert not list(tmp_path.glob(".out.preparing-*")), "the temporary folder is removed"


def test_gsm8k_empty_split_is_refused(tmp_path):
    src = gsm8k_source(tmp_path)
    (src / "train.jsonl").write_bytes(b"\n  \n")  # blank lines only: no rows
    out = tmp_path / "out"
    res = prepare("gsm8k", "--source", src, "--out", out)
    assert res.returncode == 2
    assert (
        f"{src / 'train.jsonl'}: no rows (the file is empty); fix: fill it with one JSON object per line" in res.stderr
    )
    assert not out.exists()


def test_gsm8k_a_bad_test_split_leaves_the_previous_preparation_whole(tmp_path):
    out = tmp_path / "out"
    first = prepare("gsm8k", "--source", gsm8k_source(tmp_path, name="v1"), "--out", out)
    assert first.returncode == 0, first.stderr
    before = folder_state(out)
    assert set(before) == {"train.parquet", "test.parquet", "manifest.json"}

    # A new source whose train split is fine (and different) and whose test split has a bad row.
    src = gsm8k_source(tmp_path, train_extra=real_lines("train", 8)[-1], test_extra=b'{"question": "x"}\n', name="v2")
    res = prepare("gsm8k", "--source", src, "--out", out)
    assert res.returncode == 2
    assert f"{src / 'test.jsonl'}:4: field 'answer': missing" in res.stderr
    assert folder_state(out) == before, "no new train.parquet beside the old test.parquet"


def test_gsm8k_manifest_names_source_rows_and_checksums(tmp_path):
    src = gsm8k_source(tmp_path)
    out = tmp_path / "out"
    res = prepare("gsm8k", "--source", src, "--out", out)
    assert res.returncode == 0, res.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "gsm8k" and manifest["source"] == str(src.resolve())
    assert manifest["source_files"] == {
        str(src / f"{s}.jsonl"): {"sha256": sha(src / f"{s}.jsonl"), "bytes": (src / f"{s}.jsonl").stat().st_size}
        for s in ("train", "test")
    }
    for split, rows in (("train", 6), ("test", 3)):
        entry = manifest["files"][f"{split}.parquet"]
        assert entry["rows"] == rows == len(pd.read_parquet(out / f"{split}.parquet"))
        assert entry["sha256"] == sha(out / f"{split}.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"], "no temporary folder left behind"


def test_gsm8k_the_same_command_twice_at_once(tmp_path):
    """Two preparations into one folder at the same time: both succeed and the folder matches its manifest."""
    src = gsm8k_source(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, str(REPO / "launch" / "prepare_data.py"), "gsm8k", "--source", str(src), "--out", str(out)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=170)
        assert p.returncode == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        assert sha(out / name) == entry["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]


def nlu_source(tmp_path: Path) -> Path:
    """A small copy of the real NLU folder: three train CSVs, two test CSVs."""
    root = tmp_path / "nlu"
    for split, names in (
        ("trainset", ["alarm_set", "play_music", "weather_query"]),
        ("testset", ["alarm_set", "play_music"]),
    ):
        (root / split).mkdir(parents=True)
        for name in names:
            src = NLU / split / f"{name}.csv"
            if not src.exists():
                src = NLU / split / "csv" / f"{name}.csv"
            shutil.copy(src, root / split / f"{name}.csv")
    return root


def test_memalpha_nlu_csv_rows_are_named(tmp_path):
    root = nlu_source(tmp_path)
    music = root / "trainset" / "play_music.csv"
    lines = music.read_bytes().splitlines(keepends=True)
    header = lines[0].decode().rstrip("\n").split(";")
    row = lines[1].decode().rstrip("\n").split(";")
    short = ";".join(row[:3]).encode() + b"\n"  # line 3 after the insert below: too few fields
    no_intent = row.copy()
    no_intent[header.index("intent")] = ""
    latin1 = ";".join(row).replace("play", "pl\xe4y", 1).encode("latin-1") + b"\n"
    music.write_bytes(lines[0] + lines[1] + short + ";".join(no_intent).encode() + b"\n" + b"".join(lines[2:]))
    weather = root / "trainset" / "weather_query.csv"
    weather.write_bytes(weather.read_bytes() + latin1)
    weather_lines = weather.read_bytes().count(b"\n")
    (root / "testset" / "play_music.csv").write_bytes(b"")
    out = tmp_path / "out"
    res = prepare("memalpha", "--source", f"nlu:{root}", "--out", out)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    err = res.stderr
    assert f"{music}:3: 3 fields, the header has {len(header)}; fix: one ';'-separated value per column" in err
    assert f"{music}:4: field 'intent': empty; fix: give the row's intent (or delete the row)" in err
    assert f"{weather}:{weather_lines}: not UTF-8 (byte 0xe4 at column" in err
    assert f"{root / 'testset' / 'play_music.csv'}: no rows (the file is empty)" in err
    assert err.splitlines()[0].startswith("prepare_data.py memalpha: 4 problem(s) in the input")
    assert not out.exists()


def test_memalpha_parquet_rows_with_unreadable_chunks_are_named(tmp_path):
    good = prepare(
        "memalpha", "--source", f"nlu:{nlu_source(tmp_path)}", "--out", tmp_path / "nlu_out", "--num-train", "3"
    )
    assert good.returncode == 0, good.stderr
    manifest = json.loads((tmp_path / "nlu_out" / "manifest.json").read_text())
    assert manifest["files"]["train.parquet"]["rows"] == 3
    assert manifest["files"]["memalpha_source/train.parquet"]["rows"] == 3
    assert len(manifest["source_files"]) == 5

    frame = pd.read_parquet(tmp_path / "nlu_out" / "memalpha_source" / "train.parquet")
    frame.loc[1, "chunks"] = '["Sentence: a\\nLabel: 1"'  # cut JSON
    src = tmp_path / "mem"
    src.mkdir()
    frame.to_parquet(src / "train.parquet")
    pd.read_parquet(tmp_path / "nlu_out" / "memalpha_source" / "test.parquet").to_parquet(src / "test.parquet")
    res = prepare("memalpha", "--source", src, "--out", tmp_path / "out")
    assert res.returncode == 2
    assert f"{src / 'train.parquet'} row 2: field 'chunks': not valid JSON" in res.stderr
    assert "fix: a JSON list of text chunks" in res.stderr
    assert not (tmp_path / "out").exists()

    frame.iloc[:0].to_parquet(src / "train.parquet")
    res = prepare("memalpha", "--source", src, "--out", tmp_path / "out")
    assert res.returncode == 2
    assert f"{src / 'train.parquet'}: no rows" in res.stderr


def test_tool_memory_refuses_an_empty_split_and_writes_a_manifest(tmp_path):
    res = prepare("tool_memory", "--out", tmp_path / "out", "--num-train", "0")
    assert res.returncode == 2
    assert res.stderr.strip() == (
        f"prepare_data.py tool_memory: --num-train must be >= 1 (an empty split), got 0; "
        f"nothing was written to {tmp_path / 'out'}"
    )
    assert not (tmp_path / "out").exists()
    res = prepare("tool_memory", "--out", tmp_path / "out", "--num-train", "4", "--num-test", "2")
    assert res.returncode == 0, res.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["options"] == {"num_train": 4, "num_test": 2, "seed": 0}
    assert {k: v["rows"] for k, v in manifest["files"].items()} == {"train.parquet": 4, "test.parquet": 2}
