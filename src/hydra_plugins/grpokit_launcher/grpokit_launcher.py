"""Hydra launcher ``hydra/launcher=grpokit``: validate every sweep point, then submit them together.

Unlike Hydra's submitit launcher it never blocks until the jobs end (hydra#2479, #1847), submits
nothing when any point is invalid, and writes the sweep's manifest. The work is in
:mod:`grpokit.submit.stages`; this file is the thin plugin Hydra discovers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.grpokit_launcher._config import GrpokitLauncherConf  # noqa: F401  (registers the node)


class GrpokitLauncher(Launcher):
    def __init__(self) -> None:
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from grpokit.submit.stages import launch_sweep  # heavy imports stay out of plugin discovery
        from grpokit.validate import SweepValidationError

        assert self.config is not None and self.hydra_context is not None
        try:
            return launch_sweep(self.config, self.hydra_context, [list(o) for o in job_overrides], initial_job_idx)
        except SweepValidationError as exc:  # a point that cannot even be built (before validation)
            print(exc, file=sys.stderr)
            raise SystemExit(2) from None
