"""verl's own trainer configuration, composed from the installed package.

The kit never copies verl's schema: it composes ``verl/trainer/config/ppo_trainer.yaml`` from the
installed wheel with Hydra's compose API, so a verl upgrade changes the schema in one place.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

#: verl's trainer config name (``python -m verl.trainer.main_ppo`` uses the same).
VERL_CONFIG_NAME = "ppo_trainer"


def verl_config_dir() -> Path:
    """The ``trainer/config`` folder of the installed verl."""
    _lean_imports()
    import verl

    return Path(os.path.dirname(verl.__file__)) / "trainer" / "config"


def _lean_imports() -> None:
    # verl imports `datasets`, which imports TensorFlow and JAX when they are installed (the GPU
    # image has JAX): seconds per process for frameworks the kit never uses.
    os.environ.setdefault("USE_TF", "0")
    os.environ.setdefault("USE_JAX", "0")
    # ...and logs "Disabling Tensorflow/JAX because ..." at INFO on import: noise in every command.
    datasets_log = logging.getLogger("datasets")
    if datasets_log.level == logging.NOTSET:
        datasets_log.setLevel(logging.WARNING)


def compose_verl(overrides: list[str]) -> DictConfig:
    """Compose verl's ``ppo_trainer`` config with ``overrides`` (Hydra override grammar).

    Works on a machine without a GPU. Runs outside any running Hydra app: a global Hydra
    instance (the sweep's) is saved and restored around the call.

    Raises:
        hydra.errors.ConfigCompositionException: an override names a key verl does not have
            (verl's message: "Could not override ... To append use +key") or has a bad value.
    """
    saved = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            return compose(VERL_CONFIG_NAME, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:
            GlobalHydra.instance().initialize(saved)


@functools.lru_cache(maxsize=1)
def verl_base() -> DictConfig:
    """verl's defaults, unresolved (interpolations kept as written in verl's YAML)."""
    return compose_verl([])


def apply_overrides(overrides: list[str]) -> DictConfig:
    """verl's config with ``overrides`` applied to a copy of :func:`verl_base`.

    The same result as :func:`compose_verl` for overrides of values (the kit never switches verl's
    config groups) at a fraction of the cost: Hydra's own parser and override step run
    (:mod:`grpokit.config.override_step`), the defaults list is not rebuilt, and the copy is an
    unpickling, not a deep copy. This is what makes validating hundreds of points before a
    submission quick. ``tests/unit/test_config_points.py`` checks both paths agree.

    Raises:
        hydra.errors.ConfigCompositionException: as :func:`compose_verl`.
    """
    from grpokit.config import override_step

    cfg = _verl_template().copy()
    override_step.apply(cfg, overrides)
    return cfg


@functools.lru_cache(maxsize=1)
def _verl_template():
    from grpokit.config.override_step import Template

    return Template(verl_base())
