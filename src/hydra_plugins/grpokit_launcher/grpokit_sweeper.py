"""Hydra sweeper ``hydra/sweeper=grpokit``: Hydra's basic sweeper, composing each point once.

Hydra's basic sweeper checks that every point of a batch composes (``validate_batch_is_legal``:
one full composition per point, about a second each for the kit's config, which holds verl's complete
one) and then hands the batch to the launcher, which composes every point again. With the kit's
launcher that check is its first step: it composes the first point fully and the others from it by
Hydra's override step (:func:`grpokit.submit.points.point_loader`), and refuses the whole batch, before
anything is written or submitted, when one point does not compose. With any other launcher this
sweeper is Hydra's basic sweeper unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from hydra_plugins.grpokit_launcher._config import GrpokitSweeperConf  # noqa: F401  (registers the node)


class GrpokitSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from hydra_plugins.grpokit_launcher.grpokit_launcher import GrpokitLauncher

        if isinstance(self.launcher, GrpokitLauncher):
            return  # the launcher composes (and so checks) every point before it does anything else
        super().validate_batch_is_legal(batch)
