"""verl's verdicts kept on disk: a config verl passed is not handed to verl again, and only then."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.validate import check_each, verl_verdicts


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty verdict store of its own (the process's read of the store is cleared before and after)."""
    monkeypatch.setenv("GRPOKIT_CACHE_DIR", str(tmp_path / "cache"))
    verl_verdicts._kept.cache_clear()
    yield tmp_path / "cache"
    verl_verdicts._kept.cache_clear()


def kept(store) -> list[str]:
    files = list(store.glob("verl_verdicts-*.txt"))
    return files[0].read_text().split() if files else []


def point(base, *extra, name="unit"):
    overrides = [*base, f"sweep_name={name}", *extra]
    return build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})


@pytest.fixture
def verl_calls(monkeypatch):
    """Counts calls of verl's validate_config (still verl's own code)."""
    import verl.utils.config

    calls = []
    real = verl.utils.config.validate_config

    @functools.wraps(real)
    def counted(*args, **kwargs):
        calls.append(kwargs["config"])
        return real(*args, **kwargs)

    monkeypatch.setattr(verl.utils.config, "validate_config", counted)
    return calls


def test_a_pass_is_kept_and_holds_for_another_sweep_name_but_not_for_another_value(base, store, verl_calls):
    assert check_each([point(base, "verl.data.train_batch_size=8")]) == []
    assert len(kept(store)) == 1 and len(verl_calls) == 1
    verl_verdicts._kept.cache_clear()  # a later command reads the store again
    # the same config in another sweep (its names differ): verl is not asked again
    assert check_each([point(base, "verl.data.train_batch_size=8", name="later")]) == []
    assert len(verl_calls) == 1
    # another value is another config: verl checks it, and the pass is kept too
    assert check_each([point(base, "verl.data.train_batch_size=16")]) == []
    assert len(verl_calls) == 2 and len(kept(store)) == 2


def test_a_failure_is_never_kept_and_says_the_same_the_second_time(base, store, verl_calls):
    bad = point(base, "cluster.gpus_per_node=2", "verl.data.train_batch_size=7", "verl.actor_rollout_ref.rollout.n=1")
    first = check_each([bad])
    verl_verdicts._kept.cache_clear()
    assert first == check_each([bad]) and len(first) == 1 and "real_train_batch_size" in first[0].message
    assert kept(store) == []
    # a failing point is checked with the names hidden, then as it is (verl's words on its own config)
    assert len(verl_calls) == 4


def test_a_check_that_reads_a_file_or_a_name_is_not_kept(base, store, monkeypatch, tmp_path):
    import verl.utils.config

    real = verl.utils.config.validate_config
    spec = point(base)
    (tmp_path / "tokenizer.json").write_text("{}")

    def reads_a_file(*args, **kwargs):
        (tmp_path / "tokenizer.json").read_text()  # as a critic's HFModelConfig reads its tokenizer
        return real(*args, **kwargs)

    monkeypatch.setattr(verl.utils.config, "validate_config", reads_a_file)
    assert check_each([spec]) == [] and kept(store) == []

    seen = []

    def reads_the_name(*args, **kwargs):
        seen.append(str(kwargs["config"].trainer.experiment_name))  # ??? raises while the names are hidden
        return real(*args, **kwargs)

    monkeypatch.setattr(verl.utils.config, "validate_config", reads_the_name)
    assert check_each([spec]) == [] and kept(store) == []
    assert seen == [spec.name]  # the second check, on the config as it is, read the real name


_NO_VERL = """
import json, sys
from grpokit.validate import validate_points
from grpokit.config.compose import compose_kit
from grpokit.submit.points import PointLoader, build_points

points = json.loads(sys.argv[1])
validate_points(build_points(None, PointLoader(compose_kit, points[0]), points))
print("verl imported" if "verl" in sys.modules or "torch" in sys.modules else "verl not imported")
"""


def test_a_command_whose_points_verl_passed_before_does_not_import_verl(base, store):
    points = json.dumps([[*base, f"verl.data.train_batch_size={b}"] for b in (8, 16)])
    env = {**os.environ, "GRPOKIT_CACHE_DIR": str(store)}
    runs = [
        subprocess.run([sys.executable, "-c", _NO_VERL, points], capture_output=True, text=True, env=env, timeout=600)
        for _ in range(2)
    ]
    assert [r.stdout.strip() for r in runs] == ["verl imported", "verl not imported"], runs[1].stderr[-2000:]
    assert len(kept(store)) == 2


def test_the_sweep_command_typed_again_as_another_sweep_asks_verl_nothing(base, store):
    # The command as typed (a dry run, then the same points under another sweep_name). The test's
    # own store (GRPOKIT_CACHE_DIR, a documented setting) keeps other tests' passes out of the count:
    # a config verl is asked about and passes adds a line, so an unchanged file means verl was not asked.
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "GRPOKIT_CACHE_DIR": str(store)}
    args = [a for a in base if not a.startswith("sweep_name=")]

    def sweep(name: str) -> subprocess.CompletedProcess:
        command = [sys.executable, str(repo / "launch" / "sweep.py"), "-m", *args, f"sweep_name={name}"]
        command += ["dry_run=true", "verl.data.train_batch_size=8,16"]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)

    first = sweep("first")
    assert first.returncode == 0, first.stderr[-2000:]
    assert len(kept(store)) == 2
    again = sweep("again")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "dry run: 2 point(s) validated" in again.stdout
    assert len(kept(store)) == 2
