"""Turn the kit's ``verl:`` node into verl's own command-line overrides.

The kit's ``verl:`` node starts as verl's complete default config (see :mod:`grpokit.config.store`),
so only the leaves that an experiment, a hardware profile or the command line changed are emitted,
each as ``key=value`` in Hydra's override grammar; a key verl does not have (``override_config.*``,
``engine_kwargs.vllm.*``, ``reward_kwargs.*``) is emitted as ``+key=value``, as verl requires.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from grpokit.config.hydra_internals import raw_value
from grpokit.config.verl_schema import VerlConfigRef, active, base_of

_PLAIN = re.compile(r"^[A-Za-z_/][\w./:@-]*$")
_KEYWORDS = {"true", "false", "null", "none", "inf", "nan"}


def format_value(value: Any) -> str:
    """Render a Python value in Hydra's override grammar (``[a,b]``, ``{k:v}``, quoted strings).

    Example: ``format_value(["console", "tensorboard"]) == "[console,tensorboard]"``.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _KEYWORDS:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def raw_leaves(node: DictConfig) -> dict[str, Any]:
    """``{dotted.key: unresolved value}`` of every leaf below ``node``, as flattening
    ``OmegaConf.to_container(node, resolve=False)`` gives them, in a fifth of the time.

    A leaf is a scalar, a list (as a plain list), an empty mapping (``{}``), or a mapping or list
    node that holds an interpolation, ``???`` or None (that text or None). Reads OmegaConf's
    nodes directly (:func:`grpokit.config.hydra_internals.raw_value`): verl's tree has about 900 leaves
    and a sweep reads it once per point. ``tests/unit/test_config_points.py`` checks both agree.
    """
    out: dict[str, Any] = {}
    _walk(node, "", out)
    return out


def _walk(node: Any, prefix: str, out: dict[str, Any]) -> None:
    content = raw_value(node)
    if not isinstance(content, dict) or not content:  # {} or a node that is an interpolation, ??? or None
        out[prefix[:-1]] = {} if isinstance(content, dict) else content
        return
    for key, child in content.items():
        if isinstance(child, DictConfig):
            _walk(child, f"{prefix}{key}.", out)
        elif isinstance(child, ListConfig) and isinstance(raw_value(child), list):
            out[f"{prefix}{key}"] = OmegaConf.to_container(child, resolve=False)
        else:
            out[f"{prefix}{key}"] = raw_value(child)


def flat_base() -> Mapping[str, Any]:
    """verl's defaults of the active config (:func:`grpokit.config.verl_schema.use`) as
    ``{dotted.key: unresolved value}`` (read-only; computed once per config and process)."""
    return _flat_of(active())


@functools.lru_cache(maxsize=4)
def _flat_of(ref: VerlConfigRef) -> Mapping[str, Any]:
    return MappingProxyType(raw_leaves(base_of(ref)))


flat_base.cache_clear = _flat_of.cache_clear  # type: ignore[attr-defined]


def _plain(raw: Any) -> bool:
    """An unresolved leaf that is its own resolved value (selecting it would give it back unchanged)."""
    if raw is None or isinstance(raw, (bool, int, float)):
        return True
    return isinstance(raw, str) and "${" not in raw and raw != "???"


def verl_overrides(cfg: DictConfig) -> list[str]:
    """The overrides that turn verl's defaults into this point's ``cfg.verl``.

    Args:
        cfg: the composed kit config; ``cfg.verl`` holds verl's keys. Kit interpolations
            (``${kit_mul:...}``, ``${experiment.data_dir}``) are resolved leaf by leaf; verl's own
            interpolations are never resolved here (verl resolves them itself).

    Returns:
        Overrides in a stable (sorted) order, e.g. ``["data.train_batch_size=8",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager"]`` (``++`` for a new key
        below a mapping verl's YAML sets to an interpolation: :func:`_below_interpolation`).
    """
    base = flat_base()
    raw = raw_leaves(cfg.verl)
    out: list[str] = []
    for key in sorted(raw):
        if key in base and raw[key] == base[key]:
            continue
        value = raw[key]
        if not _plain(value):  # an interpolation (kit's or verl's), ???, or a container that may hold one
            value = OmegaConf.select(cfg, f"verl.{key}", throw_on_missing=True)
            if OmegaConf.is_config(value):
                value = OmegaConf.to_container(value, resolve=True)
        prefix = "" if key in base else "++" if _below_interpolation(key, base) else "+"
        out.append(f"{prefix}{key}={format_value(value)}")
    return out


def _below_interpolation(key: str, base: Mapping[str, Any]) -> bool:
    """Whether a parent of ``key`` is, in verl's defaults ``base``, an interpolation (the ref's
    ``megatron.override_transformer_config: ${oc.select:actor_rollout_ref.actor.megatron...}``): the key may
    be there already through it, so Hydra must force-add it (``++``; ``+`` says "An item is already at")."""
    parts = key.split(".")
    return any(
        isinstance(base.get(".".join(parts[:i])), str) and "${" in base[".".join(parts[:i])]
        for i in range(1, len(parts))
    )
