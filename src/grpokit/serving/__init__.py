"""Servers the kit starts next to verl: :mod:`grpokit.serving.vllm` (``vllm serve``: command, key,
readiness, stop), used by the job's sidecars (:mod:`grpokit.runtime.processes.sidecars`) and by
``grpokit serve-eval``."""
