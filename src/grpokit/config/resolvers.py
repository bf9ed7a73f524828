"""OmegaConf resolvers the kit's YAML uses to derive settings from the swept ones.

Derived settings are written as interpolations in ``configs/experiment/*.yaml`` (for example
``max_num_seqs: ${kit_mul:${verl.data.train_batch_size},${verl.actor_rollout_ref.rollout.n}}``),
so a swept value flows into every setting that depends on it while an explicit override, which
replaces the interpolation, still wins.
"""

from __future__ import annotations

import math
import re

from omegaconf import DictConfig, OmegaConf

from grpokit.paths import package_file, project_dir


def _round_up(value: int, multiple: int) -> int:
    return int(math.ceil(int(value) / int(multiple)) * int(multiple))


_RESOLVERS = {
    "kit_add": lambda *xs: sum(int(x) for x in xs),
    "kit_mul": lambda *xs: math.prod(int(x) for x in xs),
    "kit_min": lambda *xs: min(int(x) for x in xs),
    "kit_round_up": _round_up,
    "kit_repo_root": lambda: str(project_dir()),
    "kit_package_file": lambda rel: str(package_file(rel)),
}


def register() -> None:
    """Register the kit's resolvers once per process (idempotent)."""
    for name, fn in _RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


_REFERENCE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


def derivation_inputs(cfg: DictConfig) -> dict[str, list[str]]:
    """``{key: [settings the kit derives from it]}``: every key a ``${kit_*:...}`` interpolation of
    ``cfg`` (unresolved) reads, e.g. ``verl.actor_rollout_ref.rollout.n`` ->
    ``[verl.actor_rollout_ref.rollout.max_num_seqs]``. Keys are absolute config paths."""
    found: dict[str, list[str]] = {}

    def walk(node, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}.{i}")
        elif isinstance(node, str) and "${kit_" in node:
            for key in _REFERENCE.findall(node):
                found.setdefault(key, []).append(path)

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return found
