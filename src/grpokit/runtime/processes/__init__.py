"""What the in-job driver starts and watches: the job's Ray cluster (head, workers, probe), ports and
the per-user node state, the sidecar servers, the trainer process and its verl hook, the watchdog and
the pruning watcher, the signal relay, the stop inquiry that asks Slurm after a signal, and the
node's checks (kernels, CUDA, shared folders). Their verdicts come from ``runtime.decisions``.
"""
