"""Bad input refused before submission, on the key the user typed, with the fix (issue 13.2, 13.5-13.7).

The Slurm facts here are parsed from real ``scontrol`` output shapes (Slurm 22.05); the checks against
the live local cluster are in tests/integration/test_slurm_request.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.problems import Problem
from grpokit.slurm.cluster import array_chunks, gres_gpus, parse_facts
from grpokit.slurm.times import parse_time_min
from grpokit.validate import SweepValidationError, check_sweep, validate_point
from grpokit.validate.command_line import check
from grpokit.validate.model_checks import model_positions
from grpokit.validate.slurm_request import check_facts

REPO = Path(__file__).resolve().parents[2]

PARTITIONS = (
    "PartitionName=gpu AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxTime=UNLIMITED "
    "MaxCPUsPerNode=UNLIMITED Nodes=node[1-3] State=UP TotalCPUs=24 TotalNodes=3 MaxMemPerNode=UNLIMITED\n"
    "PartitionName=short AllowGroups=ALL Default=NO MaxNodes=2 MaxTime=02:00:00 "
    "MaxCPUsPerNode=UNLIMITED Nodes=node[1-3] State=UP TotalCPUs=24 TotalNodes=3 MaxMemPerNode=6000\n"
)
NODES = "".join(
    f"NodeName=node{k} Arch=x86_64 CoresPerSocket=8  CPUAlloc=0 CPUEfctv=8 CPUTot=8 Gres={gres} "
    "NodeAddr=127.0.0.1 OS=Linux 6.1 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=8000 AllocMem=0 "
    "Partitions=gpu,short  State=IDLE\n"
    for k, gres in ((1, "gpu:4"), (2, "gpu:a100:4(S:0-1)"), (3, "(null)"))
)
CONFIG = "Configuration data as of 2026-12-01T08:00:00\nMaxArraySize            = 64\nMaxJobCount = 20000\n"
FACTS = parse_facts(PARTITIONS, NODES, CONFIG)
REQUEST = {"kind": "slurm", "partition": "gpu", "nodes": 1, "gpus_per_node": 1, "cpus_per_task": 2, "mem_gb": 1}


def keys(problems: list[Problem]) -> list[str]:
    return [p.key for p in problems]


# --- the Slurm request (facts as scontrol prints them) -------------------------------------------


def test_scontrol_facts_are_parsed():
    assert FACTS.max_array_size == 64
    assert FACTS.partitions["short"].max_time_min == 120 and FACTS.partitions["gpu"].max_time_min is None
    assert FACTS.partitions["short"].max_mem_per_node_mb == 6000 and FACTS.partitions["short"].max_nodes == 2
    node2 = FACTS.nodes["node2"]
    assert (node2.cpus, node2.memory_mb, node2.gpus, node2.partitions) == (8, 8000, 4, ("gpu", "short"))
    assert FACTS.nodes["node3"].gpus == 0
    assert gres_gpus("gpu:2,shard:8") == 2 and gres_gpus("gpu:h100:8(S:0-1),gpu:a100:2") == 10
    assert parse_time_min("1-00:00:00") == 1440 and parse_time_min("30") == 30 and parse_time_min("INFINITE") is None


def test_a_request_that_fits_has_no_problem():
    assert check_facts(REQUEST, FACTS) == []
    assert check_facts({**REQUEST, "mem_gb": None, "gpus_per_node": 4, "cpus_per_task": 8, "nodes": 2}, FACTS) == []


@pytest.mark.parametrize(
    ("change", "key", "fix"),
    [
        ({"partition": "debug"}, "cluster.partition", "one of: gpu, short"),
        ({"mem_gb": 64}, "cluster.mem_gb", "cluster.mem_gb<=7"),
        ({"cpus_per_task": 16}, "cluster.cpus_per_task", "cluster.cpus_per_task<=8"),
        ({"gpus_per_node": 8}, "cluster.gpus_per_node", "cluster.gpus_per_node<=4"),
        ({"partition": "short", "timeout_min": 720}, "cluster.timeout_min", "cluster.timeout_min<=120"),
        ({"partition": "short", "mem_gb": 7}, "cluster.mem_gb", "cluster.mem_gb<=5"),  # MaxMemPerNode 6000
        ({"nodes": 3, "gpus_per_node": 2}, "cluster.nodes", "cluster.nodes<=2"),  # node3 has no GPU
        ({"partition": "short", "nodes": 3, "gpus_per_node": 0}, "cluster.nodes", "cluster.nodes<=2"),  # MaxNodes
    ],
)
def test_a_request_slurm_cannot_satisfy_names_the_key_and_the_value_that_fits(change, key, fix):
    problems = check_facts({**REQUEST, **change}, FACTS)
    assert keys(problems) == [key]
    assert fix in problems[0].fix
    assert "\n" not in str(problems[0])


def test_arrays_are_split_at_max_array_size():
    assert array_chunks(130, 64) == [range(0, 64), range(64, 128), range(128, 130)]
    assert array_chunks(64, 64) == [range(0, 64)]
    assert array_chunks(3, 64) == [range(0, 3)]


def test_arrays_per_request_share_the_parallelism_and_the_dry_run_shows_them(bare_point):
    from grpokit.config.point import PointSpec
    from grpokit.submit.arrays import array_requests, dry_run_section

    def spec(i: int, mem: int) -> PointSpec:
        cluster = {**REQUEST, "mem_gb": mem, "timeout_min": 5, "signal_delay_s": 60, "array_parallelism": 4}
        return bare_point(Path("/r"), i, cluster)

    specs = [spec(0, 1), spec(1, 2), spec(2, 1), spec(3, 1)]  # cluster.mem_gb=1,2,1,1 swept
    arrays = array_requests(specs, max_size=2)
    assert [(m, c.mem_gb, c.array_parallelism) for m, c in arrays] == [([0, 2], 1, 2), ([3], 1, 2), ([1], 2, 4)]
    text = "\n".join(dry_run_section(specs, max_size=2))
    # a request of one point is one job (submitit submits a map_array of one as a plain job)
    assert text.startswith("## Slurm request (3 arrays)") and text.count("#SBATCH --array=") == 1
    assert "#SBATCH --array=0-1%2" in text and "#SBATCH --mem=2GB" in text
    assert "#SBATCH --output=/r/submitit/%A_%a_0_log.out" in text  # the sweep's own submitit folder


def test_a_refused_submission_leaves_the_sweep_folder_consistent(tmp_path, bare_point):
    from grpokit.config.point import PointSpec
    from grpokit.run_folder.manifest import write_manifest
    from grpokit.submit.arrays import SubmissionError, after_refusal

    def folder(name: str) -> tuple[Path, list[PointSpec]]:
        sweep = tmp_path / name
        specs = [bare_point(sweep, i, REQUEST, name) for i in range(2)]
        for spec in specs:  # what the sweep command writes before it submits
            Path(spec.run_dir).mkdir(parents=True)
            (Path(spec.run_dir) / "point.json").write_text(spec.to_json())
        (sweep / "submitit").mkdir()
        write_manifest(sweep, specs, [None, None], experiment="e", cluster="slurm", swept_keys=[])
        return sweep, specs

    refusal = SubmissionError("Slurm refused the submission: x; fix: y")
    sweep, specs = folder("new")
    assert "removed" in after_refusal(sweep, specs, refusal) and not sweep.exists()
    sweep, specs = folder("kept")
    (Path(specs[0].run_dir) / "notes.txt").write_text("mine")  # not the kit's: never removed
    assert "keeps" in after_refusal(sweep, specs, refusal) and (sweep / "000" / "notes.txt").exists()
    sweep, specs = folder("half")
    half = SubmissionError("...", cancelled=["77"], job_ids=["77_0", None])
    after_refusal(sweep, specs, half)
    entries = json.loads((sweep / "manifest.json").read_text())["points"]
    assert [e["job_id"] for e in entries] == ["77_0", None]  # status.py shows 000 cancelled, 001 not submitted
    sweep, specs = folder("resumed")
    write_manifest(sweep, specs, ["5_0", "5_1"], experiment="e", cluster="slurm", swept_keys=[])
    before = (sweep / "manifest.json").read_text()
    assert "unchanged" in after_refusal(sweep, specs, refusal) and (sweep / "manifest.json").read_text() == before


# --- the command line (before Hydra) --------------------------------------------------------------


def test_a_misspelt_kit_key_gets_did_you_mean_not_hydras_plus_hint():
    _, problems = check(["cluster=slurm", "cluster.partiton=debug"])
    assert keys(problems) == ["cluster.partiton"] and "did you mean cluster.partition" in problems[0].fix
    _, problems = check(["cluster=slurm", "+cluster.partiton=debug"])  # Hydra would add it silently
    assert keys(problems) == ["cluster.partiton"] and "did you mean cluster.partition" in problems[0].fix
    _, problems = check(["runtime.max_timeout_requeue=1"])
    assert "did you mean runtime.max_timeout_requeues" in problems[0].fix
    _, problems = check(["cluster.mem_gb=4"])  # cluster=local has no memory request
    assert "add cluster=slurm" in problems[0].fix


def test_a_wrong_type_and_a_negative_size_are_reported_on_the_key_typed():
    _, problems = check(["verl.data.max_response_length=512,1k"])
    assert keys(problems) == ["verl.data.max_response_length"] and "'1k' is not an integer" in problems[0].message
    _, problems = check(["verl.actor_rollout_ref.rollout.n=-3"])
    assert keys(problems) == ["verl.actor_rollout_ref.rollout.n"] and ">= 1" in problems[0].fix
    _, problems = check(["cluster=slurm", "cluster.mem_gb=lots", "verl.data.shuffle=yes"])
    assert keys(problems) == ["cluster.mem_gb", "verl.data.shuffle"]
    _, problems = check(["verl.actor_rollout_ref.actor.optim.lr=fast"])
    assert keys(problems) == ["verl.actor_rollout_ref.actor.optim.lr"]


def test_what_verl_accepts_is_accepted():
    # -1 means "all" or "off" for these verl keys; null, lists and floats where verl has them.
    argv = [
        "verl.trainer.save_freq=-1",
        "verl.data.train_max_samples=-1",
        "verl.actor_rollout_ref.actor.fsdp_config.fsdp_size=-1",
        "verl.trainer.total_training_steps=null",
        "verl.trainer.logger=[console,tensorboard]",
        "verl.actor_rollout_ref.actor.optim.lr=1e-6,3e-6",
        "+runtime.env.NCCL_DEBUG=INFO",
        "+verl.actor_rollout_ref.model.override_config.rope_theta=10000",
    ]
    out, problems = check(argv)
    assert problems == [] and out == argv


def test_a_plus_key_the_kit_already_sets_is_an_update():
    key = "verl.actor_rollout_ref.model.override_config.attn_implementation"
    out, problems = check([f"+{key}=eager", "verl.data.train_batch_size=8"])
    assert problems == [] and out == [f"++{key}=eager", "verl.data.train_batch_size=8"]
    out, problems = check([f"{key}=sdpa"])  # no +: the kit's file has it, so it is a plain override
    assert problems == [] and out == [f"{key}=sdpa"]
    out, problems = check(["cluster=slurm", "cluster.additional_parameters={exclusive:true}"])  # as slurm.yaml says
    assert problems == [] and out[1] == "++cluster.additional_parameters={exclusive:true}"
    _, problems = check(["verl.actor_rollout_ref.model.override_config.rope_theta=1"])
    assert "add it with +verl.actor_rollout_ref.model.override_config.rope_theta" in problems[0].fix


# --- one point: the model, derived settings, verl's checks ---------------------------------------


def point(overrides: list[str], index: int = 0):
    return build_point(compose_kit(overrides), index=index, kit_overrides=overrides, swept={})


def test_response_length_above_the_models_positions_is_refused(base):
    # the tiny model has 32768 positions, like Qwen3's config.json
    _, problems = validate_point(point([*base, "verl.data.max_response_length=100000"]))
    assert keys(problems) == ["verl.data.max_response_length"]
    assert "32768" in problems[0].message and "max_response_length<=32256" in problems[0].fix
    _, problems = validate_point(point([*base, "verl.data.max_response_length=32256"]))
    assert keys(problems) == ["verl.actor_rollout_ref.rollout.max_model_len"]  # 512 + 32256 + 256 margin
    assert "max_model_len=32768" in problems[0].fix


def test_a_multimodal_checkpoints_text_config_and_rope_scaling_decide():
    assert model_positions({"text_config": {"max_position_embeddings": 262144}, "vision_config": {}}) == (
        262144,
        "text_config.max_position_embeddings",
    )
    scaled = {"max_position_embeddings": 32768, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    assert model_positions(scaled)[0] == 131072
    assert model_positions({"max_position_embeddings": 4096, "seq_length": 2048})[0] == 2048


def test_a_model_without_tokenizer_is_refused(base, tiny_model_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(tiny_model_dir, bare)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        (bare / name).unlink(missing_ok=True)
    _, problems = validate_point(point([*base, f"model.path={bare}"]))
    assert keys(problems) == ["model.path"] and "no tokenizer" in problems[0].message
    assert "make_tiny_model.py" in problems[0].fix


def test_a_derived_setting_typed_explicitly_is_honoured_or_refused(base, tmp_path):
    with pytest.raises(SweepValidationError) as err:
        point([*base, "verl.trainer.n_gpus_per_node=8"])
    assert keys(err.value.problems) == ["verl.trainer.n_gpus_per_node"]
    assert "cluster.gpus_per_node=8" in err.value.problems[0].fix
    ckpt = tmp_path / "mine"
    spec = point(
        [
            *base,
            "verl.trainer.n_gpus_per_node=1",
            "verl.trainer.nnodes=1",
            "verl.trainer.experiment_name=my_run",
            f"verl.trainer.default_local_dir={ckpt}",
        ]
    )
    assert spec.checkpoint_dir == str(ckpt) and f"trainer.default_local_dir={ckpt}" in spec.verl_overrides
    assert "trainer.experiment_name=my_run" in spec.verl_overrides
    # two points cannot share that one checkpoint folder
    twin = point([*base, f"verl.trainer.default_local_dir={ckpt}"], index=1)
    assert keys(check_sweep([spec, twin])) == ["verl.trainer.default_local_dir"]


def test_a_wrong_type_in_a_point_names_the_key_typed_not_the_derived_one(base):
    with pytest.raises(SweepValidationError) as err:
        point([*base, "verl.data.max_response_length=1k"])
    assert keys(err.value.problems) == ["verl.data.max_response_length"]


def test_lora_without_vllm_here_is_deferred_to_the_job_and_said_once(base, capsys):
    import importlib.util

    if importlib.util.find_spec("vllm"):
        pytest.skip("vLLM is installed here: verl checks the LoRA rank itself")
    for index in (0, 1):
        _, problems = validate_point(point([*base, "verl.actor_rollout_ref.model.lora_rank=8"], index=index))
        assert problems == []
    err = capsys.readouterr().err
    assert err.count("left to the job") == 1


def test_verls_own_check_prints_nothing(base, capsys):
    _, problems = validate_point(point(base))
    assert problems == []
    out = capsys.readouterr()
    assert "validate_config" not in out.out and "critic" not in out.err


def test_problems_are_one_line_each_and_grouped_over_points():
    problems = [Problem(f"00{i}", "cluster.mem_gb", "too much", "lower it") for i in range(3)]
    text = str(SweepValidationError([*problems, Problem("all points", "k", "m", "f")]))
    lines = text.splitlines()
    assert lines[0].startswith("2 problem(s) in all points; nothing was submitted")  # the lines printed
    assert lines[1] == "[000, 001, 002] cluster.mem_gb: too much; fix: lower it" and len(lines) == 3


# --- the reference run's own overrides (verl. in front, as the README says) ----------------------

REFERENCE_FILE = REPO / "tests" / "data" / "reference_gsm8k_overrides.txt"


def reference_overrides(model: Path, data: Path, out: Path) -> list[str]:
    """The reference run's overrides with ``verl.`` in front, as the README says to pass verl keys."""
    text = "\n".join(line for line in REFERENCE_FILE.read_text().splitlines() if not line.startswith("#"))
    lines = text.format(model=model, data=data, out=out).split()
    return [("+verl." + o[1:]) if o.startswith("+") else "verl." + o for o in lines]


def test_the_reference_runs_overrides_are_accepted_and_reproduce_its_settings(
    base, tiny_model_dir, gsm8k_dir, tmp_path
):
    ref = reference_overrides(tiny_model_dir, gsm8k_dir, tmp_path / "outputs")
    argv, problems = check(["model=tiny", *ref])
    assert problems == []
    spec = point([*base, *argv[1:]])
    cfg, problems = validate_point(spec)
    assert problems == []
    from omegaconf import OmegaConf

    for item in ref:
        key, _, typed = item.lstrip("+").partition("=")
        got = OmegaConf.select(cfg, key[len("verl.") :])
        if key == "verl.trainer.logger":  # the kit keeps its own file logger next to the user's (issue 12.8)
            assert {"console", "tensorboard"} <= set(got)
            continue
        if typed in ("True", "False"):
            want = typed == "True"
        elif typed == "null":
            want = None
        else:
            try:
                want = json.loads(typed)
            except ValueError:
                want = typed
        assert got == want, f"{key}: the point has {got!r}, the reference {want!r}"
    assert spec.checkpoint_dir == str(tmp_path / "outputs" / "Qwen3_5-0_8B-GSM8K-b8n8-r1024-s48-tb-save24")


# --- the commands' own refusals -------------------------------------------------------------------


def test_resubmit_accepts_only_states_that_can_run_again(tmp_path):
    for states, said in (("bogus", "no such state"), ("completed", "is final"), ("failed,running", "still Slurm's")):
        out = subprocess.run(
            [sys.executable, str(REPO / "launch" / "resubmit.py"), str(tmp_path), "--states", states],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr


def test_sweep_help_starts_with_the_kits_usage():
    out = subprocess.run(
        [sys.executable, str(REPO / "launch" / "sweep.py"), "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0].startswith("usage: python launch/sweep.py")
    assert "cluster:" in out.stdout and "slurm_local" in out.stdout and "Examples:" in out.stdout
    assert out.stdout.index("Examples:") < out.stdout.index("Hydra's flags")
    assert len(lines) < 120 and "actor_rollout_ref:" not in out.stdout  # not verl's 1,130-line config
