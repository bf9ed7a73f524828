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
launcher this sweeper is Hydra's basic sweeper unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from hydra_plugins.grpokit_launcher._config import GrpokitSweeperConf  # noqa: F401  (registers the node)


class GrpokitSweeper(BasicSweeper):
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
            return super().sweep(arguments)
        assert self.config is not None and self.hydra_context is not None
        params = [*self._parse_config(), *arguments]
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
