"""The project's own ``configs/`` on Hydra's search path, before the package's (Hydra's
``SearchPathPlugin``, discovered in the ``hydra_plugins`` namespace like the launcher).

A researcher's experiment, hardware profile or cluster file goes to ``<project>/configs/<group>/``
(the project folder: :func:`grpokit.paths.project_dir`): a new name adds an option, a packaged name
is overridden by the project's file of that name; the wheel keeps carrying the defaults.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class GrpokitProjectConfigs(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from grpokit.paths import CONFIG_DIR, config_dirs

        for folder in config_dirs():
            if folder != CONFIG_DIR:
                search_path.prepend(provider="grpokit-project", path=f"file://{folder}")
