"""Register verl's defaults in Hydra's ConfigStore so the kit's ``verl:`` node starts from them.

With verl's whole tree under ``verl:``, every real verl key can be overridden on the sweep's
command line (``verl.data.train_batch_size=16``) and a misspelt key fails at composition with
Hydra's "Could not override" error, before anything is submitted.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from grpokit.config import resolvers, schema
from grpokit.config.verl_schema import verl_base

GROUP = "verl_base"


def register() -> None:
    """Store verl's defaults as ``verl_base/ppo_trainer``, the kit's typed sections
    (:func:`grpokit.config.schema.register`) and register the kit's resolvers."""
    resolvers.register()
    schema.register()
    ConfigStore.instance().store(
        group=GROUP, name="ppo_trainer", node=OmegaConf.to_container(verl_base(), resolve=False)
    )
