# ruff: noqa: E501  (the log excerpts keep the real, long lines of Ray and vLLM)
"""The first real error of a trainer log (grpokit.runtime.decisions.first_error), on log excerpts shaped
like the GPU host's trainer.log when vLLM's engine core died (issue 15)."""

from __future__ import annotations

from pathlib import Path

from grpokit.runtime.decisions.first_error import clean_line, first_error, first_error_in_file

# vLLM 0.24's engine core without FlashInfer, as Ray relays it (colour codes, worker prefix, vLLM's
# log prefix), followed much later by verl's replay-buffer failure in the driver process.
ENGINE_DIED = """\
INFO 12-01 09:58:02 [utils.py:253] non-default args: {'model': '/root/models/q35'}
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m WARNING 12-01 09:58:40 [__init__.py:93] FlashInfer not found, using Triton
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m (EngineCore_DP0 pid=4390) ERROR 12-01 09:59:10 [core.py:866] EngineCore failed to start.
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m (EngineCore_DP0 pid=4390) ERROR 12-01 09:59:10 [core.py:866] Traceback (most recent call last):
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m (EngineCore_DP0 pid=4390) ERROR 12-01 09:59:10 [core.py:866]   File "/root/site/vllm/v1/engine/core.py", line 857, in run_engine_core
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m (EngineCore_DP0 pid=4390) ERROR 12-01 09:59:10 [core.py:866]     engine_core = EngineCoreProc(*args, **kwargs)
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m (EngineCore_DP0 pid=4390) ERROR 12-01 09:59:10 [core.py:866]   File "/root/site/vllm/model_executor/layers/mamba/qwen_gdn_linear_attn.py", line 41, in <module>
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m (EngineCore_DP0 pid=4390) ERROR 12-01 09:59:10 [core.py:866]     import flashinfer
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m (EngineCore_DP0 pid=4390) ERROR 12-01 09:59:10 [core.py:866] ModuleNotFoundError: No module named 'flashinfer'
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m Traceback (most recent call last):
\x1b[36m(vLLMHttpServer pid=4211)\x1b[0m RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
(TaskRunner pid=3902) step:1 - generating
Traceback (most recent call last):
  File "/root/site/verl/trainer/main_ppo.py", line 42, in main
    run_ppo(config)
RuntimeError: Sync replay buffer selected terminal groups with no materializable trajectories; check the rollout
"""


def test_the_engines_own_error_is_found_not_verls_replay_buffer_message() -> None:
    assert first_error(ENGINE_DIED.splitlines()) == "ModuleNotFoundError: No module named 'flashinfer'"


def test_prefixes_and_ray_repeat_notes_are_taken_off() -> None:
    line = "\x1b[36m(WorkerDict pid=77, ip=10.1.2.3)\x1b[0m ERROR 12-01 10:00:01.250 [x.py:9] ValueError: bad [repeated 3x across cluster]"
    assert clean_line(line) == "ValueError: bad"


def test_a_chained_traceback_gives_its_root_cause() -> None:
    log = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.94 GiB.",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor()",
    ]
    assert first_error(log) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.94 GiB."


def test_warnings_and_error_words_outside_a_traceback_are_not_errors() -> None:
    log = [
        "WARNING 12-01 09:58:40 [utils.py:1] ImportError: flash_attn is not installed, using sdpa",
        "UserWarning: TypedStorage is deprecated",
        "(TaskRunner pid=1) step:2 - critic/score/mean:0.0 - actor/pg_loss:0.0",
    ]
    assert first_error(log) is None


def test_interleaved_lines_of_other_workers_do_not_hide_the_exception() -> None:
    log = [
        "(WorkerDict pid=5) Traceback (most recent call last):",
        '(WorkerDict pid=5)   File "fsdp_workers.py", line 900, in update_actor',
        "(TaskRunner pid=3) Training Progress:  33%|###3      | 1/3",
        "(WorkerDict pid=5) AssertionError: micro batch has no tokens",
    ]
    assert first_error(log) == "AssertionError: micro batch has no tokens"


def test_in_file_reads_the_log_and_is_none_when_missing(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    log.write_text(ENGINE_DIED, encoding="utf-8")
    assert first_error_in_file(log) == "ModuleNotFoundError: No module named 'flashinfer'"
    assert first_error_in_file(tmp_path / "absent.log") is None


# The end of trainer.log when verl's actor died in its first old-log-prob pass (one H200,
# 2026-12-01, fused logits with padding kept): Ray wraps the worker's error in RayTaskError(...).
RAY_WRAPPED = """\
Traceback (most recent call last):
  File "/root/site/verl/trainer/main_ppo.py", line 184, in main
    run_ppo(config, task_runner_class=TaskRunnerV1)
  File "/root/site/ray/_private/worker.py", line 1053, in get_objects
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError(IndexError): ray::TaskRunnerV1.run() (pid=11147, ip=192.0.2.2, actor_id=1842bed5)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/root/site/verl/trainer/main_ppo.py", line 155, in run
    self.trainer.fit(self.agent_loop_manager)
ray.exceptions.RayTaskError(IndexError): ray::WorkerDict.actor_rollout_ref_compute_log_prob() (pid=12323)
  File "/root/site/verl/workers/engine/fsdp/transformer_impl.py", line 1462, in prepare_model_outputs
    arange = torch.arange(output.log_probs.shape[1], device=output.log_probs.device)
                          ~~~~~~~~~~~~~~~~~~~~~~^^^
IndexError: tuple index out of range
Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""


def test_rays_task_error_wrapper_gives_the_workers_own_exception() -> None:
    assert first_error(RAY_WRAPPED.splitlines()) == "IndexError: tuple index out of range"
