"""Hydra sweeper ``hydra/sweeper=grpokit``: Hydra's basic sweeper, composing each point once.

Hydra's basic sweeper checks that every point of a batch composes (``validate_batch_is_legal``:
one full composition per point, about a second each for the kit's config, which holds verl's complete
one) and then hands the batch to the launcher, which composes every point again. With the kit's
launcher that check is its first step: it composes the first point fully and the others from it by
Hydra's override step (:func:`grpokit.submit.points.point_loader`), and refuses the whole batch, before
anything is written or submitted, when one point does not compose.

Hydra's basic sweeper also saves the composed config as ``<hydra.sweep.dir>/multirun.yaml``
(``logs/.hydra/``) before it launches anything; with the kit's launcher it does not: a dry run or a
refused sweep must leave no file behind, and a submitted sweep's record is its own folder
(``manifest.json``, each ``point.json``, ``submissions.jsonl``; docs/run-folder.md). With any other
launcher this sweeper is Hydra's basic sweeper unchanged; a full disk (ENOSPC, EDQUOT) while it
writes that record ends the command with one line, nothing written by the kit and nothing submitted.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpokit.config.hydra_internals import basic_sweeper_class, sweeper_config_overrides
from hydra_plugins.grpokit_launcher._config import GrpokitSweeperConf  # noqa: F401  (registers the node)


class GrpokitSweeper(basic_sweeper_class()):  # Hydra's BasicSweeper
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from hydra_plugins.grpokit_launcher.grpokit_launcher import GrpokitLauncher

        if isinstance(self.launcher, GrpokitLauncher):
            return  # the launcher composes (and so checks) every point before it does anything else
        super().validate_batch_is_legal(batch)

    def sweep(self, arguments: list[str]) -> Any:
        """Hydra 1.3's ``BasicSweeper.sweep`` without saving ``multirun.yaml``, for the kit's launcher."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from hydra_plugins.grpokit_launcher.grpokit_launcher import GrpokitLauncher

        if not isinstance(self.launcher, GrpokitLauncher):
            try:
                return super().sweep(arguments)
            except OSError as exc:  # the kit's own writes say a full disk themselves (grpokit.submit.no_space)
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                print(self._full_disk_line(exc), file=sys.stderr)
                raise SystemExit(2) from None
        assert self.config is not None and self.hydra_context is not None
        params = [*sweeper_config_overrides(self), *arguments]
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        self.overrides = self.split_arguments(parser.parse_overrides(params), self.max_batch_size)
        returns = []
        first_index = 0
        while not self.is_done():
            batch = self.get_job_batch()
            results = self.launcher.launch(batch, initial_job_idx=first_index)
            for r in results:
                _ = r.return_value  # raises a job's exception, as Hydra's sweeper does
            first_index += len(batch)
            returns.append(results)
        return returns

    def _full_disk_line(self, exc: OSError) -> str:
        from omegaconf import OmegaConf

        from grpokit.submit.no_space import free_bytes, human

        where = Path(str(self.config.hydra.sweep.dir))
        try:
            needed: int | None = len(OmegaConf.to_yaml(self.config).encode())
        except Exception:
            needed = None
        return (
            f"{exc.strerror} writing Hydra's record of the command ({where / 'multirun.yaml'}; about "
            f"{human(needed)} needed, {human(free_bytes(where))} free); nothing was written to a sweep folder "
            f"and nothing was submitted. Free space under {where.parent} (or choose another logs_root=) "
            "and run the same command again."
        )
