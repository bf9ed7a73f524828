"""grpokit.slurm.sbatch: the one renderer of the kit's batch script, against a golden file and
against ``slurm/train.sbatch``'s own ``#SBATCH`` header.

To accept an intended change of the script: ``GRPOKIT_UPDATE_GOLDEN=1 pytest tests/unit/test_slurm_sbatch.py``
and review the diff of tests/data/sbatch_golden.txt.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpokit.config.compose import compose_kit
from grpokit.config.schema import ClusterConf
from grpokit.slurm import sbatch
from grpokit.slurm.executor import executor_parameters, make_executor, signal_option
from grpokit.slurm.times import parse_time_min

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "sbatch_golden.txt"
TRAIN_SBATCH = REPO / "slurm" / "train.sbatch"


@functools.cache
def _composed(overrides: tuple[str, ...]) -> dict:
    return OmegaConf.to_container(compose_kit(list(overrides)).cluster, resolve=True)


def cluster_of(*overrides: str) -> ClusterConf:
    """The ``cluster`` section a point gets, composed as the sweep composes it (a copy)."""
    return ClusterConf.of(copy.deepcopy(_composed(overrides)))


def test_the_batch_script_of_a_fixed_point_is_the_golden_file():
    # a 3-point array on the bundled cluster, with one site setup line
    cluster = cluster_of("cluster=slurm_local", "cluster.setup=[module load cuda]")
    params = executor_parameters(cluster, name="golden", num_points=3)
    folder = "/sweeps/golden/submitit"  # absolute: submitit makes a relative folder absolute from the cwd
    text = sbatch.render(params, map_count=3, folder=folder, command=f"python -u -m submitit.core._submit {folder}")
    if os.environ.get("GRPOKIT_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "the batch script changed: see this module's docstring"


def test_train_sbatch_asks_what_cluster_slurm_asks():
    """slurm/train.sbatch runs ``launch/run.py cluster=slurm``: its driver acts on the warning at
    cluster=slurm's lead, so the script's --signal (and the rest of its request) must be what the
    renderer writes for cluster=slurm's settings."""
    cluster = cluster_of("cluster=slurm")
    rendered = sbatch.options(
        sbatch.render(
            executor_parameters(cluster, name="grpokit", num_points=1), map_count=None, folder="/f", command="true"
        )
    )
    shipped = sbatch.options(TRAIN_SBATCH.read_text())
    # what the plain script does on purpose differently (each said in its header comment): its
    # output file is logs/grpokit_<id>.out in the repository, not submitit's folder;
    own = {"output"}
    # it asks no memory, so that it runs as shipped on the bundled cluster (nodes of 8000 MB);
    # submitit's wckey is submitit's own.
    not_in_script = {"mem", "wckey"}
    assert shipped["signal"] == rendered["signal"] == signal_option(600)  # cluster/slurm.yaml's lead
    assert parse_time_min(str(shipped["time"])) == parse_time_min(str(rendered["time"]))
    compared = set(shipped) - own - {"time"}
    assert {k: shipped[k] for k in compared} == {k: rendered.get(k) for k in compared}
    assert set(rendered) - set(shipped) == not_in_script


def test_one_point_is_one_job_and_several_are_an_array():
    cluster = cluster_of("cluster=slurm_local")
    one = sbatch.options(sbatch.preview(cluster, name="p", num_points=1))
    three = sbatch.options(sbatch.preview(cluster, name="p", num_points=3))
    assert "array" not in one and one["output"].endswith("/%j_0_log.out")  # submitit's map_array of one
    assert three["array"] == "0-2%3" and three["output"].endswith("/%A_%a_0_log.out")
    assert three["requeue"] is True and three["signal"] == "B:USR2@120"


def test_submitit_writes_the_script_the_renderer_renders(tmp_path):
    """The executor the kit submits with holds exactly :func:`executor_parameters` and writes its
    submission file with the same renderer (the real submission: tests/integration/test_slurm_request.py)."""
    pytest.importorskip("submitit")
    cluster = cluster_of("cluster=slurm_local")
    params = executor_parameters(cluster, name="p", num_points=2)
    executor = make_executor(tmp_path, cluster, name="p", num_points=2)
    assert executor.parameters == params
    command = "python -u -m submitit.core._submit x"
    expected = sbatch.render(params, map_count=None, folder=str(tmp_path), command=command)
    assert executor._make_submission_file_text(command, "uid") == expected


def test_serve_eval_sbatch_asks_nothing_the_bundled_cluster_lacks():
    """Issue 37: slurm/serve_eval.sbatch asked a fixed --mem=64G, which the bundled cluster (nodes of
    8000 MB) refused ("Requested node configuration is not available"). Like train.sbatch it asks no
    memory; its CPUs fit a node of slurm/local_cluster.sh as shipped."""
    import re

    shipped = sbatch.options((REPO / "slurm" / "serve_eval.sbatch").read_text())
    assert "mem" not in shipped and not any(k.startswith("mem-per") for k in shipped)
    cluster_script = (REPO / "slurm" / "local_cluster.sh").read_text()
    node_cpus = int(re.search(r"CPUS=\$\{SLURM_LOCAL_CPUS_PER_NODE:-(\d+)\}", cluster_script).group(1))
    assert int(shipped["cpus-per-task"]) <= node_cpus and shipped["gres"] == "gpu:1"
