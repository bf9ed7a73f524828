"""``manifest.json`` through its typed record (grpokit.run_folder.manifest): the format of
docs/run-folder.md unchanged, older manifests still read, a foreign key a one-line error."""

from __future__ import annotations

import json

import pytest

from grpokit.run_folder.manifest import ManifestError, SweepManifest, read_manifest, replace_job_ids, write_manifest
from grpokit.run_folder.sweep_reader import load_sweep


def test_the_written_file_reads_back_and_writes_back_byte_for_byte(tmp_path, bare_point):
    specs = [bare_point(tmp_path, i, swept={"lr": i}, kit_overrides=[f"lr={i}"]) for i in range(2)]
    write_manifest(tmp_path, specs, ["7_0", None], experiment="e", cluster="slurm", swept_keys=["lr"])
    first = (tmp_path / "manifest.json").read_text()
    data = json.loads(first)
    assert list(data) == ["sweep", "created", "experiment", "cluster", "swept_keys", "dry_run", "rehearsal", "points"]
    assert list(data["points"][0]) == [  # docs/run-folder.md's order
        *("index", "name", "overrides", "swept", "run_dir", "job_id", "array_job_id", "array_task_id"),
        *("submitted", "history"),
    ]
    manifest = read_manifest(tmp_path)
    assert manifest.points[0].display_job_id == "7_0" and manifest.points[1].display_job_id is None
    manifest.write(tmp_path)
    assert (tmp_path / "manifest.json").read_text() == first
    replace_job_ids(manifest, {1: ("9_0", "not submitted")})
    manifest.code, manifest.code_recorded = None, True  # use_live_code=true: "code": null
    manifest.write(tmp_path)
    again = json.loads((tmp_path / "manifest.json").read_text())
    assert again["code"] is None and again["points"][1]["history"][0]["state"] == "not submitted"
    assert read_manifest(tmp_path).to_json() == again


def test_an_older_manifest_without_the_later_keys_reads_with_their_defaults(tmp_path):
    # before dry_run, rehearsal, code and history existed; the Slurm id only as array ids
    run = tmp_path / "000_a"
    point = {"index": 0, "name": "000_a", "run_dir": str(run), "array_job_id": "12", "array_task_id": 3}
    (tmp_path / "manifest.json").write_text(json.dumps({"sweep": "old", "points": [point]}))
    manifest = read_manifest(tmp_path)
    assert (manifest.dry_run, manifest.rehearsal, manifest.swept_keys, manifest.code_recorded) == (
        False,
        False,
        None,
        False,
    )
    (entry,) = manifest.points
    assert (entry.overrides, entry.swept, entry.history, entry.display_job_id) == ([], {}, [], "12_3")
    sweep = load_sweep(tmp_path)
    assert sweep.name == "old" and sweep.points[0].job_id == "12_3" and not sweep.rehearsal
    assert "code" not in manifest.to_json(), "a manifest without a code record is not given one"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"sweep": "s"}, "has no 'points' list"),
        ({"points": [], "sweeps": "s"}, "unknown key sweeps (known: sweep, created"),
        ({"points": [{"index": 0, "run_dir": "/r"}]}, "points[0].name is missing"),
        ({"points": [{"index": "0", "name": "a", "run_dir": "/r"}]}, "points[0].index='0' must be the point's index"),
        (
            {"points": [{"index": 0, "name": "a", "run_dir": "/r", "history": [{"job_id": "1"}]}]},
            "points[0].history[0].state is missing",
        ),
        ({"points": [], "dry_run": "yes"}, "dry_run='yes' must be true or false"),
    ],
)
def test_a_foreign_manifest_is_one_line_naming_the_file_and_key(tmp_path, data, says):
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError) as err:
        read_manifest(tmp_path)
    assert str(err.value).startswith(str(tmp_path / "manifest.json")) and says in str(err.value)
    assert "\n" not in str(err.value)
    assert isinstance(err.value, ValueError), "callers that catch ValueError for a bad manifest still do"


def test_from_json_names_the_source_it_is_given():
    with pytest.raises(ManifestError, match=r"^logs/x/manifest.json: unknown key points\[0\]\.job"):
        SweepManifest.from_json(
            {"points": [{"index": 0, "name": "a", "run_dir": "/r", "job": "1"}]}, "logs/x/manifest.json"
        )
