"""The plugins' config nodes (a module Hydra's plugin scanner skips: dataclasses need a real import)."""

from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore


@dataclass
class GrpokitLauncherConf:
    _target_: str = "hydra_plugins.grpokit_launcher.grpokit_launcher.GrpokitLauncher"


@dataclass
class GrpokitSweeperConf:
    """Hydra's basic sweeper's settings (``hydra.sweeper.max_batch_size``, ``hydra.sweeper.params``)."""

    _target_: str = "hydra_plugins.grpokit_launcher.grpokit_sweeper.GrpokitSweeper"
    # OmegaConf 2.3 reads typing.Optional, not `X | None`, in structured configs
    max_batch_size: Optional[int] = None  # noqa: UP045
    params: Optional[dict[str, str]] = None  # noqa: UP045


ConfigStore.instance().store(group="hydra/launcher", name="grpokit", node=GrpokitLauncherConf, provider="grpokit")
ConfigStore.instance().store(group="hydra/sweeper", name="grpokit", node=GrpokitSweeperConf, provider="grpokit")
