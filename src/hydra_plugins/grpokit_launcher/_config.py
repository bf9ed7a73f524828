"""The launcher's config node (a module Hydra's plugin scanner skips: dataclasses need a real import)."""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class GrpokitLauncherConf:
    _target_: str = "hydra_plugins.grpokit_launcher.grpokit_launcher.GrpokitLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="grpokit", node=GrpokitLauncherConf, provider="grpokit")
