"""Check a point against the installed verl: its schema (Hydra composition) and ``validate_config``."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import re
import warnings

from omegaconf import DictConfig, OmegaConf, open_dict

from grpokit.config.key_hints import hints
from grpokit.config.overrides import flat_base
from grpokit.config.point import PointSpec
from grpokit.config.verl_schema import apply_overrides, lean_imports
from grpokit.problems import Problem, note

# verl keys whose children are free-form: a new key below them is expected, not a typo.
OPEN_PREFIXES = (
    "actor_rollout_ref.model.override_config.",
    "actor_rollout_ref.rollout.engine_kwargs.",
    "reward.custom_reward_function.reward_kwargs.",
    "reward.reward_kwargs.",  # verl's reward managers read config.reward.get("reward_kwargs", {}) (DAPO's)
    "ray_kwargs.ray_init.",
)
_COULD_NOT_OVERRIDE = re.compile(r"Could not override '([^']+)'")
_FULL_KEY = re.compile(r"full_key: (\S+)")


def suggest(key: str) -> str:
    """``did you mean ...`` for a key verl does not have, from verl's own keys and renames only
    (:func:`grpokit.config.key_hints.hints`: a legacy key's new name, a misspelling, a key holding the
    words typed, the same leaf elsewhere); no guess across meanings."""
    from grpokit.config import verl_legacy

    new = verl_legacy.translate(key)
    if new:
        return (
            f"verl's main_ppo reads verl.{new} (verl translates {key.split('.', 1)[0]}.* only in its "
            f"fully-async entry point): set verl.{new}"
        )
    close = hints(key, _known_keys())
    if close:
        return "did you mean " + " or ".join(f"verl.{c}" for c in close) + "?"
    parent = key.rsplit(".", 1)[0]
    return f"check the key against {parent or 'verl'}'s options (python -m verl.trainer.main_ppo --cfg job)"


@functools.lru_cache(maxsize=1)
def _known_keys() -> tuple[str, ...]:
    """verl's keys, leaves and the sections above them."""
    base = flat_base()
    sections = {".".join(k.split(".")[:i]) for k in base for i in range(1, k.count(".") + 1)}
    return tuple(sorted(sections | {k for k in base if not k.rsplit(".", 1)[-1].startswith("_")}))


def _open_parent(key: str, base: dict) -> bool:
    from grpokit.config.verl_types import declared_kinds

    if key.startswith(OPEN_PREFIXES):
        return True
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:i])
        if parent not in base and "dict" in (declared_kinds(parent) or ()):
            return True  # a mapping field verl's dataclass declares and its YAML leaves out (mixed_precision)
        if parent in base:  # an empty mapping in verl's YAML is meant to be filled, and so is a mapping verl's
            # dataclass declares that the YAML sets to an interpolation (the ref's megatron.override_transformer_config)
            return base[parent] == {} or "dict" in (declared_kinds(parent) or ())
    return False


def check_command_line(overrides: list[str]) -> list[Problem]:
    """Catch misspelt ``verl.*`` keys on the command line before Hydra composes anything.

    Hydra's own message for them ("To append to your config use +key") suggests the wrong fix.
    """
    base = flat_base()
    problems = []
    for item in overrides:
        key = item.split("=", 1)[0]
        added = key.startswith("+")
        key = key.lstrip("+~")
        if not key.startswith("verl."):
            continue
        verl_key = key[len("verl.") :]
        known = verl_key in base or any(k.startswith(verl_key + ".") for k in base)
        if added and not known and not _open_parent(verl_key, base) or not added and not known:
            if not added and _open_parent(verl_key, base):
                fix = f"verl has no default for it: add it with +{key}=..."
            else:
                fix = suggest(verl_key)
            problems.append(Problem("all points", key, "verl has no such key", fix))
    return problems


def check_added_keys(spec: PointSpec) -> list[Problem]:
    """A ``+key`` must go below a free-form mapping; anywhere else it is almost surely a typo."""
    from grpokit.config import verl_legacy

    base = flat_base()
    problems = []
    for item in spec.verl_overrides:
        if not item.startswith("+"):
            continue
        key = item.lstrip("+").split("=", 1)[0]
        if not _open_parent(key, base) and not verl_legacy.legacy(key):  # a legacy key: legacy_keys says why
            problems.append(
                Problem(
                    spec.name,
                    f"verl.{key}",
                    "verl has no such key (it would be silently added)",
                    suggest(key),
                )
            )
    return problems


def compose_point(spec: PointSpec) -> tuple[DictConfig | None, list[Problem]]:
    """Compose verl's config with the point's overrides; a failure becomes a :class:`Problem`."""
    try:
        return apply_overrides(spec.verl_overrides), []
    except Exception as exc:  # Hydra raises several exception types for a bad override
        text = str(exc)
        match = _COULD_NOT_OVERRIDE.search(text)
        key = match.group(1) if match else "verl"
        fix = suggest(key) if match else "fix the value's type or syntax (Hydra override grammar)"
        return None, [Problem(spec.name, f"verl.{key}" if match else key, text.splitlines()[0], fix)]


def _lora_rank(cfg: DictConfig) -> int:
    """The LoRA rank verl's ``validate_config`` checks against vLLM (0: no LoRA or merged)."""
    model = cfg.actor_rollout_ref.model
    lora = model.get("lora") or {}
    rank = int(lora.get("rank", 0) or 0) or int(model.get("lora_rank", 0) or 0)
    return 0 if lora.get("merge", False) else rank


def _without_vllm_checks(cfg: DictConfig) -> DictConfig:
    """``cfg`` minus what only an installed vLLM can judge (the LoRA rank), said once; else ``cfg``.

    verl imports vLLM to check a LoRA rank and fails with "vllm version None not supported" on a
    machine without it (a login node): that check is left to the job, which validates again on a
    node with the training stack.
    """
    import importlib.util

    if _lora_rank(cfg) <= 0 or cfg.actor_rollout_ref.rollout.name != "vllm" or importlib.util.find_spec("vllm"):
        return cfg
    note(
        "vLLM is not installed here: verl's LoRA-rank check against vLLM is left to the job "
        "(it validates the point again on the training node)"
    )
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.actor_rollout_ref.model.lora_rank = 0
        if cfg.actor_rollout_ref.model.get("lora") is not None:
            cfg.actor_rollout_ref.model.lora.rank = 0
    return cfg


#: validate_config messages that name no key: (words in the message, key, fix).
_KNOWN_MESSAGES = (
    (
        "real_train_batch_size",
        "verl.data.train_batch_size",
        "make train_batch_size x rollout.n divisible by the trainer's GPUs (cluster.nodes x cluster.gpus_per_node)",
    ),
)


def _key_in(message: str, spec: PointSpec) -> str:
    """The verl key a validate_config message is about: a full key it names, else a key the user typed."""
    for words, key, _ in _KNOWN_MESSAGES:
        if words in message:
            return key
    base = flat_base()
    named = sorted((k for k in base if k in message), key=len, reverse=True)
    if named:
        return f"verl.{named[0]}"
    typed = [o.lstrip("+~").split("=", 1)[0] for o in spec.kit_overrides]
    for key in typed:
        if key.startswith("verl.") and re.search(rf"\b{re.escape(key.rsplit('.', 1)[-1])}\b", message):
            return key
    return "verl"


def run_validate_config(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """verl's own ``validate_config`` (batch divisibility, micro batches, ...), as verl runs it.

    What verl prints while checking ("All configuration checks passed", the critic warning) is
    captured: a sweep of many points would print it once per point. A config verl passed before
    is not checked again (:mod:`grpokit.validate.verl_verdicts`). verl first checks the config
    with the run's names hidden (``???``): a pass then holds whatever the names are and is kept for
    later commands; a failure is checked again as it is, so the problem is verl's word on the
    point's own config.
    """
    from grpokit.validate import verl_verdicts

    checked = _without_vllm_checks(cfg)
    if verl_verdicts.passed(spec):
        return []
    with verl_verdicts.names_hidden(checked):
        problem, opened = _validate_config(spec, checked, cfg)
    if problem is None:
        if not opened:  # the verdict rests on the config alone
            verl_verdicts.record(spec)
        return []
    problem, _ = _validate_config(spec, checked, cfg)
    return [] if problem is None else [problem]


def _validate_config(spec: PointSpec, checked: DictConfig, cfg: DictConfig) -> tuple[Problem | None, list[str]]:
    """verl's ``validate_config`` on ``checked``: (its problem or None, the files it opened)."""
    from grpokit.validate import verl_verdicts

    lean_imports()  # the sweep's first import of verl
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), verl_verdicts.watch() as opened:
            warnings.simplefilter("ignore")
            validate_config(
                config=checked, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
            )
    except Exception as exc:
        text = str(exc)
        match = _FULL_KEY.search(text)
        cause = exc.__cause__ or exc
        message = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        key = f"verl.{match.group(1)}" if match else _key_in(message, spec)
        fix = next((f for words, _, f in _KNOWN_MESSAGES if words in message), "change the setting verl names")
        return Problem(spec.name, key, f"verl's validate_config: {message}", fix), list(opened)
    with verl_verdicts.watch() as built:
        problem = _start_config_problem(spec, checked)
    return problem, [*opened, *built]


#: The sections verl's workers turn into its config dataclasses as they start
#: (``verl/workers/engine_workers.py``: ``omega_conf_to_dataclass(self.config.actor)``, ``.rollout``):
#: their ``__post_init__`` checks (a removed ``rollout.mode=sync``, engine-only keys) run there.
START_CONFIG_SECTIONS = ("actor_rollout_ref.actor", "actor_rollout_ref.rollout")


def _start_config_problem(spec: PointSpec, checked: DictConfig) -> Problem | None:
    """The first refusal of verl's own config dataclasses for :data:`START_CONFIG_SECTIONS`, built
    as verl's workers build them at start (on the CPU: the checks read the config only)."""
    from verl.utils.config import omega_conf_to_dataclass

    for section in START_CONFIG_SECTIONS:
        node = OmegaConf.select(checked, section)
        if node is None or "_target_" not in node or OmegaConf.missing_keys(node):
            continue  # a missing mandatory value (???) is named by the checks that read it
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                omega_conf_to_dataclass(node)
        except Exception as exc:
            cause = exc.__cause__ or exc
            message = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
            key = _key_in(message, spec)
            key = key if key != "verl" else f"verl.{section}"
            target = str(node.get("_target_")).rsplit(".", 1)[-1]
            message = f"verl's {target} (built as its workers start): {message}"
            return Problem(spec.name, key, message, "change the setting verl names")
    return None
