"""Rehearsing a sweep without GPUs (``rehearse=true``): :mod:`grpokit.rehearsal.rehearsal_trainer` stands in
for verl's trainer and :mod:`grpokit.rehearsal.answer_server` for ``vllm serve`` (Memory-RL's answer LLM,
the chained eval's servers); every other part (Slurm, Ray, the memory server, the reward, checkpoints,
requeues, verl's model merger) is the real one. Rehearsal only: nothing here is a measurement."""

#: ``runtime.trainer_cmd`` of a rehearsal (``python`` is the job's interpreter, as for verl's).
TRAINER_CMD = ("python", "-m", "grpokit.rehearsal.rehearsal_trainer")
#: The stand-in for ``vllm serve``, as a command template (``{host}``, ``{port}``, ``{name}``: the
#: served model name; ``python`` is the job's interpreter): ``chain.server_command`` of a rehearsal.
ANSWER_SERVER_CMD = (
    "python",
    "-m",
    "grpokit.rehearsal.answer_server",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "--served-model-name",
    "{name}",
)
#: The rehearsal trainer's switch: each checkpoint holds the model's real weights as verl's
#: world-size-1 FSDP shard, so verl's real model merger runs on it (``after=[merge]`` in a rehearsal).
REAL_WEIGHTS_ENV = "FAKE_TRAINER_REAL_WEIGHTS"
