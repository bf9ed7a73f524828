"""The names verl registers for its pluggable parts, read from the installed verl.

verl looks these names up only when the job reaches them (an unknown advantage estimator fails at
step 1's advantage, an unknown rollout at worker start), after minutes of start-up; the kit looks
them up before submission. Read by importing verl's registries (``verl.trainer.ppo.core_algos``:
``ADV_ESTIMATOR_REGISTRY``, ``POLICY_LOSS_REGISTRY``; ``verl.experimental.reward_loop.reward_manager``:
``REWARD_MANAGER``; ``verl.workers.rollout.base._ROLLOUT_REGISTRY``), kept on disk per installed
verl so that a command whose points verl passed before needs no import of verl.
"""

from __future__ import annotations

import functools
import importlib

#: (registry, module, attribute); an attribute that is a mapping of names (tuples: the first item).
SOURCES = (
    ("adv_estimator", "verl.trainer.ppo.core_algos", "ADV_ESTIMATOR_REGISTRY"),
    ("policy_loss", "verl.trainer.ppo.core_algos", "POLICY_LOSS_REGISTRY"),
    ("reward_manager", "verl.experimental.reward_loop.reward_manager.registry", "REWARD_MANAGER"),
    ("rollout", "verl.workers.rollout.base", "_ROLLOUT_REGISTRY"),
)

#: The Python package each of verl's rollout engines needs (``rollout.name`` -> import name).
ENGINE_PACKAGES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}


def read_registries() -> dict[str, list[str]]:
    """``{registry: sorted names}`` as the installed verl registers them (imports verl: seconds).

    A registry verl no longer has is absent from the result (its check is then skipped).
    """
    from grpokit.config.verl_schema import lean_imports

    lean_imports()
    out: dict[str, list[str]] = {}
    for name, module, attribute in SOURCES:
        try:
            registry = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError):
            continue
        out[name] = sorted({k[0] if isinstance(k, tuple) else str(k) for k in registry})
    return out


#: The job's verl's registries when they are not this process's (:func:`use`), else None.
_job: dict[str, list[str]] | None = None


def use(found: dict[str, list[str]] | None) -> None:
    """Check names against ``found`` (the job's verl's registries, read by
    :mod:`grpokit.validate.verl_worker` in the job's Python); None: this process's verl again."""
    global _job
    _job = found


def registries() -> dict[str, list[str]]:
    """The registries the points are checked against: the job's (:func:`use`), else this
    process's verl's (:func:`installed`)."""
    return _job if _job is not None else installed()


@functools.lru_cache(maxsize=1)
def installed() -> dict[str, list[str]]:
    """:func:`read_registries`, kept in the kit's cache folder under a digest of verl's version
    and the path, size and time of each registry's source file."""
    from grpokit.config.verl_schema import _version, cached_json, verl_config_dir

    root = verl_config_dir().parent.parent
    files = [root.joinpath(*module.split(".")[1:]).with_suffix(".py") for _, module, _ in SOURCES]
    return cached_json("verl_registries", _version("verl"), [f for f in files if f.is_file()], read_registries)
