"""rehearse=true covers every workload and the chain (issue 35 item 7): the decisions, in seconds.

Real: Hydra composition of the packaged experiments, the kit's sidecar command builder, the rehearsal
answer server as a process over real HTTP, the chain's plan, the status table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.config.rehearsal_plan import (
    answer_server_command,
    rehearsal_chain_refusal,
    rehearsal_sidecars,
    rehearsal_trainer_env,
)
from grpokit.config.schema import SidecarConf
from grpokit.evaluation import chained_job
from grpokit.evaluation.model_merge import MergeError, merge_failure_line, rehearsal_refusal
from grpokit.reports.chain_view import chain_columns, shown_reason
from grpokit.runtime.processes import ports
from grpokit.runtime.processes.sidecars import Sidecar, build_command
from grpokit.submit import chain


def point(overrides: list[str]):
    return build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})


# --- the answer LLM of Memory-RL: the rehearsal answer server -------------------------------------


def test_a_vllm_sidecar_without_a_command_is_served_by_the_rehearsal_answer_server():
    vllm = SidecarConf.of(dict(kind="vllm", model="/m", served_model_name="memalpha-answer", gpus=1))
    memory = SidecarConf.of(dict(kind="memory_server", answer="answer_llm"))
    own = SidecarConf.of(dict(kind="vllm", command=["python", "mine.py", "--port", "{port}"], served_model_name="x"))
    out = rehearsal_sidecars({"answer_llm": vllm, "memory_server": memory, "own": own})
    assert out["answer_llm"].command == answer_server_command("memalpha-answer")
    assert out["answer_llm"].kind == "vllm"  # its key still travels in VLLM_API_KEY
    assert out["memory_server"] == memory and out["own"] == own  # kept as given
    sc = Sidecar("answer_llm", out["answer_llm"], "127.0.0.1", 8123, "k", Path("/tmp/a.log"))
    assert build_command(sc, {}) == [
        sys.executable,
        "-m",
        "grpokit.rehearsal.answer_server",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--served-model-name",
        "memalpha-answer",
    ]
    # a served name with braces survives the job's str.format of the template
    odd = Sidecar(
        "a",
        rehearsal_sidecars({"a": SidecarConf.of(dict(kind="vllm", served_model_name="m{1}"))})["a"],
        "h",
        1,
        "",
        Path("x"),
    )
    assert build_command(odd, {})[-1] == "m{1}"


def test_memalpha_rehearsal_point_runs_the_answer_server_and_the_real_memory_server(base):
    spec = point([*base, "experiment=memalpha_grpo", "rehearse=true"])
    answer, memory = spec.sidecars["answer_llm"], spec.sidecars["memory_server"]
    assert answer.command[:3] == ["python", "-m", "grpokit.rehearsal.answer_server"]
    assert answer.command[-1] == "memalpha-answer" == answer.served_model_name
    assert memory.kind == "memory_server" and not memory.command  # the kit's own memory server, for real
    assert spec.runtime.rehearsal and not spec.runtime.needs_gpu
    assert "FAKE_TRAINER_REAL_WEIGHTS" not in spec.runtime.env  # no chain: a save costs no disk
    plain = point([*base, "experiment=memalpha_grpo"])
    assert plain.sidecars["answer_llm"].command is None  # without rehearse=true: vllm serve


@pytest.mark.timeout(60)
def test_the_rehearsal_answer_server_answers_as_vllm_over_http(tmp_path):
    port = ports.reserve_ports(1, host="127.0.0.1")[0]
    argv = [c.format(host="127.0.0.1", port=port) for c in answer_server_command("memalpha-answer")]
    argv[0] = sys.executable
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "VLLM_API_KEY": "k"})
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        auth = {"Authorization": "Bearer k"}
        assert httpx.get(f"{base}/v1/models", timeout=5).status_code == 401
        models = httpx.get(f"{base}/v1/models", headers=auth, timeout=5).json()
        assert [m["id"] for m in models["data"]] == ["memalpha-answer"]
        body = {
            "model": "memalpha-answer",
            "messages": [
                {"role": "system", "content": "what movie should i see -> Label: 37"},
                {"role": "user", "content": "Sentence: what movie should i see\nLabel?"},
            ],
        }
        answer = httpx.post(f"{base}/v1/chat/completions", json=body, headers=auth, timeout=5).json()
        assert answer["choices"][0]["message"]["content"] == "The label is \\boxed{37}."
        wrong = httpx.post(f"{base}/v1/chat/completions", json={**body, "model": "x"}, headers=auth, timeout=5)
        assert wrong.status_code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- the chain of a rehearsal: real weights, verl's merger, the answer server for eval -----------


def test_rehearsal_trainer_saves_real_weights_only_when_merge_is_chained():
    assert rehearsal_trainer_env(("merge", "eval")) == {"FAKE_TRAINER_REAL_WEIGHTS": "1"}
    assert rehearsal_trainer_env(("merge",)) == {"FAKE_TRAINER_REAL_WEIGHTS": "1"}
    assert rehearsal_trainer_env(()) == {}


def test_a_rehearsal_chain_needs_a_one_gpu_trainer_world():
    assert rehearsal_chain_refusal("000", ("merge", "eval"), 1, 1) is None
    assert rehearsal_chain_refusal("000", (), 2, 4) is None
    line = rehearsal_chain_refusal("003", ("merge", "eval"), 1, 2)
    assert line.startswith("[003] after=[merge,eval] with rehearse=true: ") and "\n" not in line
    assert "trainer world is 2" in line and "cluster.gpus_per_node=1" in line


def test_rehearsal_point_with_after_merge_saves_real_weights(base):
    spec = point([*base, "rehearse=true", "after=[merge,eval]"])
    assert spec.runtime.env["FAKE_TRAINER_REAL_WEIGHTS"] == "1"
    assert spec.runtime.env.items() >= point([*base, "rehearse=true"]).runtime.env.items()  # the rest kept
    assert "FAKE_TRAINER_REAL_WEIGHTS" not in point([*base, "after=[merge,eval]"]).runtime.env
    typed = point([*base, "rehearse=true", "after=[merge,eval]", "++runtime.env.FAKE_TRAINER_REAL_WEIGHTS=0"])
    assert typed.runtime.env["FAKE_TRAINER_REAL_WEIGHTS"] == "0"  # runtime.env typed on the command line wins


def test_plan_of_a_rehearsal_serves_eval_with_the_answer_server_and_refuses_a_wide_world(bare_point, tmp_path):
    from grpokit.config.schema import RuntimeConf

    rehearsal = RuntimeConf(rehearsal=True)
    one = ["trainer.save_freq=1", "trainer.nnodes=1", "trainer.n_gpus_per_node=1"]
    spec = bare_point(tmp_path, 0, {"kind": "slurm"}, verl_overrides=one, runtime=rehearsal)
    plan = chain.plan_of(["merge", "eval"], {}, [spec], [], False)
    assert plan.settings.server_command[:3] == ["python", "-m", "grpokit.rehearsal.answer_server"]
    assert "{name}" in plan.settings.server_command and "{port}" in plan.settings.server_command
    mine = chain.plan_of(["merge", "eval"], {"server_command": ["python", "x.py"]}, [spec], [], False)
    assert mine.settings.server_command == ["python", "x.py"]  # a command of one's own wins
    real = bare_point(tmp_path, 1, {"kind": "slurm"}, verl_overrides=one)
    assert chain.plan_of(["merge", "eval"], {}, [real], [], False).settings.server_command is None  # vLLM
    two = ["trainer.save_freq=1", "trainer.nnodes=1", "trainer.n_gpus_per_node=2"]
    wide = bare_point(tmp_path, 2, {"kind": "slurm"}, verl_overrides=two, runtime=rehearsal)
    with pytest.raises(chain.ChainError, match=r"^\[002\] after=\[merge,eval\] with rehearse=true: .*world is 2"):
        chain.plan_of(["merge", "eval"], {}, [wide], [], False)


def test_a_rehearsal_checkpoint_without_weights_is_refused_naming_why(tmp_path):
    actor = tmp_path / "actor"
    actor.mkdir()
    assert rehearsal_refusal(actor) is None  # verl's own checkpoint: no mark
    (actor / "rehearsal.json").write_text(json.dumps({"rehearsal": True, "real_weights": True}))
    assert rehearsal_refusal(actor) is None
    (actor / "rehearsal.json").write_text(json.dumps({"rehearsal": True, "real_weights": False}))
    line = rehearsal_refusal(actor)
    assert line.startswith(f"{actor} is a rehearsal checkpoint without weights") and "after=[merge,eval]" in line


def test_a_merge_failure_is_one_line_naming_the_checkpoint_and_the_cause(tmp_path):
    traceback = (
        "Traceback (most recent call last):\n  File x\nAttributeError: 'int' object has no attribute 'bfloat16'\n"
    )
    ckpt, log = tmp_path / "global_step_2" / "actor", tmp_path / "merge.log"
    line = merge_failure_line(ckpt, 1, traceback, log)
    assert line == (
        f"merging {ckpt} failed: verl's model merger exited 1: AttributeError: 'int' object has no attribute "
        f"'bfloat16' (whole output: {log})"
    )
    assert merge_failure_line(ckpt, -9, "", None) == f"merging {ckpt} failed: verl's model merger exited -9"
    exc = MergeError(1, ["python"], traceback, ckpt, log)
    assert str(exc) == line
    assert chained_job.failure_reason("merge", exc) == f"merge: {line}"
    assert chained_job.failure_reason("eval", RuntimeError("")) == "eval: RuntimeError"  # never empty
    assert chained_job.failure_reason("eval", subprocess.CalledProcessError(3, ["serve"], stderr="x\nboom\n")) == (
        "eval: serve exited 3: boom"
    )


# --- a chain step's failure in status and status --json -------------------------------------------


def test_a_failed_chain_shows_its_reason_in_the_status_table(tmp_path):
    run = tmp_path / "000"
    run.mkdir()
    (run / "chain_status.json").write_text(json.dumps({"state": "failed", "job_id": "9", "reason": "merge: boom"}))
    cols = chain_columns({"job_id": "9", "after": "5_0"}, run, "completed", None)
    assert (cols["chain"], cols["chain_reason"]) == ("failed", "merge: boom")
    assert shown_reason("", "completed", "failed", "merge: boom") == "chain failed: merge: boom"
    assert shown_reason("exit 3", "failed", "cancelled", "never ran") == "exit 3"  # the point's own trouble first
    assert shown_reason("done", "completed", "completed", "merge,eval done") == "done"
    # a record without a reason still gets one (the chain's file, named)
    (run / "chain_status.json").write_text(json.dumps({"state": "failed", "job_id": "9", "reason": ""}))
    cols = chain_columns({"job_id": "9", "after": "5_0"}, run, "completed", None)
    assert (
        cols["chain_reason"].startswith("job 9 recorded failed without a reason; see ")
        and "chain_status" in (cols["chain_reason"])
    )
