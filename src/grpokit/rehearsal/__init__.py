"""Rehearsing a sweep without GPUs (``rehearse=true``): :mod:`grpokit.rehearsal.rehearsal_trainer` stands in
for verl's trainer; every other part (Slurm, Ray, sidecars, checkpoints, requeues) is the real one."""

#: ``runtime.trainer_cmd`` of a rehearsal (``python`` is the job's interpreter, as for verl's).
TRAINER_CMD = ("python", "-m", "grpokit.rehearsal.rehearsal_trainer")
