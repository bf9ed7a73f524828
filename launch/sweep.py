"""Sweep verl GRPO training over Slurm (or run it on this workstation).

    python launch/sweep.py -m cluster=slurm verl.data.train_batch_size=8,16 \
        verl.actor_rollout_ref.rollout.n=4,8 verl.data.max_response_length=512,1024

Every point is composed with verl's own schema and validated (verl's ``validate_config`` and the
kit's checks) before anything is submitted; ``dry_run=true`` shows each point's verl command and
the Slurm request instead. Points go to Slurm as one job array; the command returns once they are
queued (``wait=true`` blocks) and leaves a manifest in the sweep folder for status.py, report.py
and resubmit.py.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from grpokit.config import store
from grpokit.paths import CONFIG_DIR

store.register()


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    # Only reached without -m: a single point, launched like a one-point sweep.
    from hydra.core.hydra_config import HydraConfig

    from grpokit.submit.sweep import launch_sweep

    class _Ctx:  # the compose API stands in for Hydra's sweep loader on this path
        class config_loader:  # noqa: N801
            @staticmethod
            def load_sweep_config(_base, overrides):
                return cfg

    overrides = list(HydraConfig.get().overrides.task)
    launch_sweep(cfg, _Ctx, [overrides], 0)


def preflight(argv: list[str]) -> None:
    """Refuse misspelt verl keys with the kit's message (naming the key and the likely fix)."""
    from grpokit.validate import SweepValidationError
    from grpokit.validate.verl_check import check_command_line

    problems = check_command_line([a for a in argv if "=" in a and not a.startswith("-")])
    if problems:
        print(SweepValidationError(problems), file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    preflight(sys.argv[1:])
    sys.exit(main())
