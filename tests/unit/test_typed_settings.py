"""Typed settings of the kit's own sections (grpokit.config.schema): cluster, runtime, sidecars.

A misspelt key or a wrong type is refused on the key (command line and YAML file alike), the
earlier names are accepted for one release with a one-line note and give the same point, the
warning signal's lead is checked against the time limit naming the point, and
``hydra.launcher.<submitit name>`` is taken as ``cluster.<name>``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from grpokit.config.compose import compose_kit
from grpokit.config.point import PointSpec, build_point
from grpokit.config.schema import ClusterConf, RuntimeConf, SidecarConf, rename_deprecated
from grpokit.problems import SweepValidationError
from grpokit.validate.command_line import check
from grpokit.validate.kit_checks import check_cluster

REPO = Path(__file__).resolve().parents[2]


def point(overrides: list[str]) -> PointSpec:
    return build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})


def test_a_misspelt_kit_key_is_refused_with_a_suggestion_by_the_sweep_command():
    out = subprocess.run(
        [sys.executable, str(REPO / "launch" / "sweep.py"), "-m", "cluster=slurm_local", "cluster.partiton=gpu"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    lines = [line for line in out.stderr.splitlines() if line.startswith("[")]
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert lines == ["[all points] cluster.partiton: no such key; fix: did you mean cluster.partition?"], out.stderr


def test_a_misspelt_key_or_a_wrong_type_in_a_cluster_file_is_refused_on_the_key(tmp_path):
    # a user's own cluster option, found through Hydra's search path, extending the kit's slurm.yaml
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "mine.yaml").write_text(
        "# @package cluster\ndefaults:\n  - slurm\n  - _self_\npartiton: gpu\n"
    )
    (tmp_path / "cluster" / "typed.yaml").write_text(
        "# @package cluster\ndefaults:\n  - slurm\n  - _self_\nnodes: two\n"
    )
    search = f"hydra.searchpath=[file://{tmp_path}]"
    with pytest.raises(ConfigCompositionException) as typo:
        compose_kit([search, "cluster=mine"])
    assert "Key 'partiton' not in '_ClusterSchema'" in str(typo.value) and "cluster.partiton" in str(typo.value)
    with pytest.raises(ConfigCompositionException) as wrong:
        compose_kit([search, "cluster=typed"])
    assert "'two'" in str(wrong.value) and "Integer" in str(wrong.value) and "cluster.nodes" in str(wrong.value)


@pytest.mark.parametrize(
    ("typed", "key", "said"),
    [
        ("cluster.nodes=two", "cluster.nodes", "'two' is not an integer"),
        ("cluster.timeout_min=1.5", "cluster.timeout_min", "is not an integer"),
        ("runtime.needs_gpu=maybe", "runtime.needs_gpu", "is not true/false"),
        ("cluster.signal_delay_s=-5", "cluster.signal_delay_s", "must be >= 0"),
    ],
)
def test_a_wrong_type_on_the_command_line_is_refused_on_the_key(typed, key, said):
    _, problems = check(["cluster=slurm_local", typed])
    assert [p.key for p in problems] == [key] and said in problems[0].message, problems


def test_the_earlier_names_are_accepted_with_a_note_and_give_the_same_point(capsys):
    new = [
        "cluster=slurm_local",
        "cluster.timeout_min=20",
        "cluster.signal_delay_s=90",
        "+cluster.additional_parameters.hold=true",
    ]
    old = [
        "cluster=slurm_local",
        "cluster.time_min=20",
        "cluster.signal_lead_s=90",
        "+cluster.additional_sbatch.hold=true",
    ]
    argv, problems = check(["-m", *old])
    notes = capsys.readouterr().err.splitlines()
    assert problems == [] and argv[1:] == new
    assert [n.split(" is deprecated")[0] for n in notes] == [
        "note: cluster.time_min",
        "note: cluster.signal_lead_s",
        "note: cluster.additional_sbatch",
    ]
    assert all("use cluster." in n for n in notes)
    reference = point(new)
    # the command line renamed (what the sweep hands to Hydra) and the earlier names composed as
    # a YAML file would give them: both the same request
    assert point(argv[1:]).cluster == reference.cluster
    from_yaml = point(["cluster=slurm_local", "cluster.time_min=20", "cluster.signal_lead_s=90"])
    assert dataclasses.replace(from_yaml.cluster, additional_parameters={"hold": True}) == reference.cluster
    assert any("cluster.time_min is deprecated" in n for n in from_yaml.notices)
    assert reference.cluster.timeout_min == 20 and reference.cluster.signal_delay_s == 90
    # a point.json written before the rename reads as the same typed request
    old_json = json.loads(reference.to_json())
    old_json["cluster"] = {
        ("time_min" if k == "timeout_min" else "signal_lead_s" if k == "signal_delay_s" else k): v
        for k, v in old_json["cluster"].items()
    }
    assert PointSpec.from_json(json.dumps(old_json)).cluster == reference.cluster


def test_rename_keeps_prefixes_and_sub_keys():
    argv, notes = rename_deprecated(["-m", "++cluster.additional_sbatch.x=1", "cluster.time_min=5,10", "verl.a=1"])
    assert argv == ["-m", "++cluster.additional_parameters.x=1", "cluster.timeout_min=5,10", "verl.a=1"]
    assert len(notes) == 2


def test_a_lead_at_or_past_the_time_limit_is_refused_naming_the_point_and_key():
    spec = point(["cluster=slurm_local", "cluster.timeout_min=2", "cluster.signal_delay_s=90"])
    (problem,) = check_cluster(spec)
    assert problem.point == spec.name and problem.key == "cluster.signal_delay_s"
    assert "120 s time limit" in problem.message and "cluster.timeout_min to 3 or more" in problem.fix
    assert check_cluster(point(["cluster=slurm_local", "cluster.timeout_min=3", "cluster.signal_delay_s=90"])) == []
    # the relation is the request's own, whoever builds it
    assert [p.key for p in ClusterConf(kind="slurm", timeout_min=1, signal_delay_s=0).problems("p")] == [
        "cluster.signal_delay_s"
    ]


def test_the_warning_too_near_the_start_is_worded_as_when_it_comes_and_its_fix_is_exact():
    # Issue 37: a 60 s warning before a 120 s limit was said to come "at once"; it comes 60 s after the start.
    (problem,) = ClusterConf(kind="slurm", timeout_min=2, signal_delay_s=60).problems("p")
    assert problem.message == (
        "the warning signal would come 60 s before a 120 s time limit, i.e. 60 s after the job starts; "
        "it must come more than 60 s after the start (the job's own start-up)"
    )
    assert problem.fix == "raise cluster.timeout_min to 3 or more, or lower cluster.signal_delay_s below 60"
    # each fix is the edge: what it names passes, one less does not
    assert ClusterConf(kind="slurm", timeout_min=3, signal_delay_s=60).problems("p") == []
    assert ClusterConf(kind="slurm", timeout_min=2, signal_delay_s=59).problems("p") == []
    (late,) = ClusterConf(kind="slurm", timeout_min=1, signal_delay_s=90).problems("p")
    assert "i.e. as the job starts (the delay is the limit or longer)" in late.message
    assert late.fix == "raise cluster.timeout_min to 3 or more"
    assert ClusterConf(kind="slurm", timeout_min=3, signal_delay_s=90).problems("p") == []


def test_hydra_launcher_keys_are_taken_as_the_cluster_keys(capsys):
    argv, problems = check(
        ["-m", "cluster=slurm_local", "hydra.launcher.partition=urgent", "hydra.launcher.timeout_min=20"]
    )
    assert problems == [] and argv == [
        "-m",
        "cluster=slurm_local",
        "cluster.partition=urgent",
        "cluster.timeout_min=20",
    ]
    assert "note: hydra.launcher.partition is cluster.partition in grpokit" in capsys.readouterr().err
    spec = point(argv[1:])
    assert spec.cluster.partition == "urgent" and spec.cluster.timeout_min == 20
    _, problems = check(["cluster=slurm_local", "hydra.launcher.max_num_timeout=3", "hydra.launcher.partiton=x"])
    assert [(p.key, p.fix) for p in problems] == [
        ("hydra.launcher.max_num_timeout", "set runtime.max_timeout_requeues"),
        ("hydra.launcher.partiton", "did you mean cluster.partition?"),
    ]


def test_sidecar_keys_are_checked_against_the_sidecar_settings():
    _, problems = check(["experiment=memalpha_grpo", "+sidecars.answer_llm.gpuz=1"])
    assert [(p.key, p.fix) for p in problems] == [
        ("sidecars.answer_llm.gpuz", "did you mean sidecars.answer_llm.gpus?")
    ]
    _, problems = check(["experiment=memalpha_grpo", "+sidecars.answer_llm.command=[python,x.py]"])
    assert problems == []  # a SidecarConf key the experiment file leaves out
    with pytest.raises(SweepValidationError) as err:
        point(["experiment=memalpha_grpo", "+sidecars.answer_llm.gpuz=1"])  # past the command line (compose API)
    assert [(p.key, p.fix) for p in err.value.problems] == [
        ("sidecars.answer_llm.gpuz", "did you mean sidecars.answer_llm.gpus?")
    ]
    spec = point(["experiment=memalpha_grpo"])
    assert isinstance(spec.sidecars["memory_server"], SidecarConf)  # complete: one default each


def test_the_typed_sections_carry_one_default_each():
    spec = point(["cluster=local"])
    assert isinstance(spec.cluster, ClusterConf) and isinstance(spec.runtime, RuntimeConf)
    assert spec.runtime.save_deadline_s == RuntimeConf().save_deadline_s == 900
    with pytest.raises(TypeError):  # read by attribute only (no mapping view)
        spec.cluster["gpus_per_node"]
    again = PointSpec.from_json(spec.to_json())
    assert again == spec and isinstance(again.cluster, ClusterConf)
