"""Everything the kit knows about Slurm, one fact per module (the kit's lowest layer: it imports no
other part of the kit, and config, validate, submit, runtime and results all import from it).

- :mod:`~grpokit.slurm.runner`: the one runner of ``squeue``/``scontrol``/``sacct``/``sbatch``/
  ``scancel``/``sinfo``, one-shot ``srun`` steps and ``nvidia-smi`` (every module here calls it; a
  test replaces it with an in-process fake).
- :mod:`~grpokit.slurm.times`: Slurm's time format (``--time``, ``MaxTime``, squeue's ``%L``/``%M``).
- :mod:`~grpokit.slurm.cluster`: what the cluster allows (partitions, nodes, ``MaxArraySize``) and
  :func:`~grpokit.slurm.cluster.run_slurm`, a query through the runner whose failure is a
  :class:`~grpokit.slurm.cluster.SlurmQueryError` in Slurm's own words.
- :mod:`~grpokit.slurm.executor`: a point's ``cluster`` settings as submitit's Slurm parameters (an
  array's, and a dependent job's).
- :mod:`~grpokit.slurm.sbatch`: the batch script those parameters make (one renderer for the
  submission, ``dry_run.md``, ``sbatch --test-only`` and the check of ``slurm/train.sbatch``), and
  the ``SLURM_*``/``SBATCH_*`` input variables a job drops before it submits another.
- :mod:`~grpokit.slurm.job_states`: job states from squeue / scontrol / sacct and the kit's words for them.
- :mod:`~grpokit.slurm.log_lines`: Slurm's own lines in a job's output (slurmstepd's ``CANCELLED AT``,
  srun's ``srun: error``) and sbatch's ``sbatch: error`` refusals.
- :mod:`~grpokit.slurm.named_jobs`: this user's jobs of one name and their submit times (``squeue``).
- :mod:`~grpokit.slurm.task`: this task's own id and allocation (inside a job): every ``SLURM_*``
  variable through :class:`~grpokit.slurm.task.JobEnv`.
- :mod:`~grpokit.slurm.time_left`: this task's time left before its limit.
- :mod:`~grpokit.slurm.stop_view`: what slurmctld says about this task when a stop signal arrives.
- :mod:`~grpokit.slurm.scancel`: ``scancel`` of the kit's jobs (the one caller of scancel).
- :mod:`~grpokit.slurm.requeue`: ``scontrol requeue`` of this task (and when/where it may run again).
- :mod:`~grpokit.slurm.nodes`: the allocation's node names and addresses, steps on other nodes, the
  partition's size.
- :mod:`~grpokit.slurm.gpus`: the GPUs this process may use, and ``nvidia-smi``'s view of this node's GPUs.
"""
