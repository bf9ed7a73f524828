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


#: The verl defaults object stored last (a command registers before its preflight and again for Hydra).
_stored: list[object] = []


def register() -> None:
    """Store verl's defaults as ``verl_base/ppo_trainer``, the kit's typed sections
    (:func:`grpokit.config.schema.register`) and register the kit's resolvers.

    Once per process for the same verl defaults (:func:`grpokit.config.verl_schema.verl_base`'s
    object); a second call with them stored already is free.
    """
    resolvers.register()
    schema.register()
    base = verl_base()
    if _stored and _stored[0] is base and ConfigStore.instance().repo.get(GROUP, {}).get("ppo_trainer.yaml"):
        return
    ConfigStore.instance().store(group=GROUP, name="ppo_trainer", node=OmegaConf.to_container(base, resolve=False))
    _stored[:] = [base]
