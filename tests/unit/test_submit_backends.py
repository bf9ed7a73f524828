"""One executor interface, a backend per ``cluster.kind`` (grpokit.submit.backends): the submission
paths ask the backend, and name no kind themselves."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpokit.submit import backends, dispatch
from grpokit.submit.backends import LocalBackend, SlurmBackend, executor_for

SUBMIT = Path(backends.__file__).parent


def test_each_kind_has_its_backend_and_an_unknown_kind_is_named():
    assert isinstance(executor_for(SimpleNamespace(kind="slurm")), SlurmBackend)
    assert isinstance(executor_for(SimpleNamespace(kind="local")), LocalBackend)
    with pytest.raises(ValueError, match=r"cluster.kind='pbs': no executor; one of \['local', 'slurm'\]"):
        executor_for(SimpleNamespace(kind="pbs"))


def test_every_cluster_kind_the_schema_accepts_has_a_backend():
    from grpokit.config.schema import CLUSTER_KINDS

    assert set(CLUSTER_KINDS) == set(backends.BACKENDS)


def test_the_local_backend_queues_nothing_and_runs_every_point_here_in_order(tmp_path, bare_point, monkeypatch):
    specs = [bare_point(tmp_path / "s", i, {"kind": "local"}) for i in range(3)]
    ran = []

    def run_local(todo):  # stand-in for the drivers (Ray and a trainer on this machine's GPU)
        ran.extend(s.name for s in todo)
        return [0, 1, 0]

    monkeypatch.setattr(dispatch, "run_local", run_local)
    local = executor_for(specs[0].cluster)
    assert local.submit(tmp_path / "s", specs) == [None, None, None]
    assert ran == [] and not (tmp_path / "s").exists(), "submit runs and writes nothing"
    assert local.run_pending(specs) == list(zip(specs, [0, 1, 0], strict=True))
    assert ran == [s.name for s in specs]
    assert not local.runs_later
    assert local.done(3, [None] * 3, again=True) == "ran 3 point(s) here"


def test_the_slurm_backend_leaves_nothing_to_run_here_and_names_its_arrays():
    slurm = SlurmBackend()
    assert slurm.run_pending([SimpleNamespace(name="000")]) == []
    assert slurm.runs_later
    assert slurm.done(2, ["120_0", "120_1"]) == "submitted 2 point(s) as Slurm array 120"
    assert slurm.done(1, ["121"], again=True) == "resubmitted 1 point(s) as Slurm job 121"


@pytest.mark.parametrize("name", ["stages.py", "resubmit_points.py"])
def test_the_submission_paths_name_no_cluster_kind(name):
    tree = ast.parse((SUBMIT / name).read_text())
    kinds = [
        f"{name}:{node.lineno} {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(x, ast.Attribute) and x.attr == "kind" for x in ast.walk(node))
    ]
    assert kinds == [], "ask grpokit.submit.backends.executor_for(cluster) instead:\n" + "\n".join(kinds)
