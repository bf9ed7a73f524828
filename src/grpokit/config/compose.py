"""Compose the kit's config outside a Hydra app (the ``sbatch`` and resubmit paths)."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from grpokit.config import store
from grpokit.paths import CONFIG_DIR


def compose_kit(overrides: list[str]) -> DictConfig:
    """``configs/config.yaml`` plus ``overrides``, as ``launch/sweep.py`` would compose one point.

    Raises:
        hydra.errors.ConfigCompositionException: an override names a key the config does not have.
    """
    store.register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose("config", overrides=list(overrides), return_hydra_config=True)
