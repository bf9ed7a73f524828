"""Register verl's defaults in Hydra's ConfigStore so the kit's ``verl:`` node starts from them.

With verl's whole tree under ``verl:``, every real verl key can be overridden on the sweep's
command line (``verl.data.train_batch_size=16``) and a misspelt key fails at composition with
Hydra's "Could not override" error, before anything is submitted.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from grpokit.config import resolvers, schema
from grpokit.config.verl_schema import active, verl_base

GROUP = "verl_base"


#: The verl defaults object stored last (a command registers before its preflight and again for Hydra).
_stored: list[object] = []


def register() -> None:
    """Store verl's defaults as ``verl_base/ppo_trainer`` (and the active config, a Megatron script's
    ``ppo_megatron_trainer`` or a recipe's, as ``verl_base/<its option>``, which a script's
    ``verl_base@verl=<option>`` chooses), the kit's typed sections
    (:func:`grpokit.config.schema.register`) and register the kit's resolvers.

    Once per process for the same verl defaults (:func:`grpokit.config.verl_schema.verl_base`'s
    object); a second call with them stored already is free.
    """
    resolvers.register()
    schema.register()
    base = verl_base()
    name = active().option
    if _stored and _stored[0] is base and ConfigStore.instance().repo.get(GROUP, {}).get(f"{name}.yaml"):
        return
    ConfigStore.instance().store(group=GROUP, name=name, node=OmegaConf.to_container(base, resolve=False))
    _stored[:] = [base]
