"""The one module that touches Hydra's and OmegaConf's private API.

What the kit needs and neither library offers publicly: Hydra's override step alone, its basic
sweeper, its mode look-up and its flags' help text; OmegaConf's unresolved node walk (a sweep reads
verl's ~900 leaves per point, where ``OmegaConf.to_container``/``select`` cost several times more) and
its interpolation grammar's parse function. Each function names the internal it wraps and the
versions it was checked against: hydra-core 1.3.8 and omegaconf 2.3.1 (``constraints/cpu.txt``;
``pyproject.toml`` pins hydra-core 1.3.* and omegaconf 2.3.*). ``tests/unit/test_hydra_internals.py``
exercises every function here and fails with "hydra-core X changed <internal>; update
config/hydra_internals.py" after an upgrade that moves one; it also fails when another module of
``src/`` touches these internals itself.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from omegaconf import Container, DictConfig, Node

__all__ = [
    "apply_overrides",
    "basic_sweeper_class",
    "child_node",
    "hydra_flags_help",
    "memoised_interpolation_parse",
    "mode_not_composed",
    "raw_value",
    "sweeper_config_overrides",
]


def basic_sweeper_class() -> type:
    """Hydra's default sweeper class, which ``hydra/sweeper=grpokit`` subclasses; its
    ``split_arguments``, ``get_job_batch``, ``is_done``, ``validate_batch_is_legal`` and ``sweep`` are
    used as Hydra defines them.

    Wraps ``hydra._internal.core_plugins.basic_sweeper.BasicSweeper`` (hydra-core 1.3.8).
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def child_node(container: Container, key: str | int) -> Node | None:
    """The node at ``key`` directly below ``container``, unresolved (an interpolation stays one), or None
    when there is no such key. A ``???`` value gives its node (no error).

    Wraps ``Container._get_node(key, validate_access=False)`` (omegaconf 2.3.1; ``throw_on_missing_key``
    defaults to False; without ``validate_access=False`` a struct config raises for a key it lacks).
    """
    return container._get_node(key, validate_access=False)  # type: ignore[return-value]


def raw_value(node: Node) -> Any:
    """The node's value as written: a scalar, ``None``, ``"???"``, an interpolation's text
    (``"${...}"``), or for a mapping or list node its content (a dict or list of nodes, or one of
    those texts or None when the node itself is an interpolation, ``???`` or None).

    Wraps ``Node._value()`` (omegaconf 2.3.1: ``ValueNode._val`` / ``BaseContainer._content``).
    """
    return node._value()


def apply_overrides(cfg: DictConfig, overrides: Sequence[Any]) -> None:
    """Hydra's override step on an already composed ``cfg``, in place: each parsed
    :class:`hydra.core.override_parser.types.Override` (values, ``+key``, ``++key``, ``~key``; no
    config groups) applied as a full composition would.

    Wraps ``hydra._internal.config_loader_impl.ConfigLoaderImpl._apply_overrides_to_config``
    (hydra-core 1.3.8, a staticmethod).

    Raises:
        hydra.errors.ConfigCompositionException: a key ``cfg`` lacks, a ``+key`` that exists, or a
            value of the wrong type, in Hydra's words.
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    ConfigLoaderImpl._apply_overrides_to_config(list(overrides), cfg)


@contextlib.contextmanager
def memoised_interpolation_parse(maxsize: int = 4096) -> Iterator[None]:
    """Within the block, OmegaConf's interpolation parser is memoised per text (``maxsize`` texts);
    the original is back on exit. Nested blocks share the outer one.

    Wraps ``omegaconf.grammar_parser.parse``, which OmegaConf's ``omegaconf.base`` and
    ``omegaconf._utils`` import by name (omegaconf 2.3.1); both names are replaced.
    """
    import omegaconf._utils
    import omegaconf.base
    import omegaconf.grammar_parser

    original = omegaconf.grammar_parser.parse
    if omegaconf.base.parse is not original:  # already inside such a block
        yield
        return
    memo = functools.lru_cache(maxsize=maxsize)(original)
    omegaconf.base.parse = omegaconf._utils.parse = memo
    try:
        yield
    finally:
        omegaconf.base.parse = omegaconf._utils.parse = original


@contextlib.contextmanager
def mode_not_composed() -> Iterator[None]:
    """Within the block, Hydra's mode look-up answers None (no ``hydra.mode`` set) without composing
    the config; the original is back on exit.

    Wraps ``hydra._internal.hydra.Hydra.get_mode(self, config_name, overrides)`` (hydra-core 1.3.8),
    which ``hydra._internal.utils._run_hydra`` calls before it runs the command.
    """
    from hydra._internal.hydra import Hydra

    original = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = original  # type: ignore[method-assign]


def hydra_flags_help() -> str:
    """Hydra's own flags (``--multirun``, ``--cfg``, ...) as its ``--hydra-help`` prints them.

    Wraps ``hydra._internal.utils.get_args_parser`` and ``hydra._internal.hydra.Hydra.format_args_help``
    (hydra-core 1.3.8).
    """
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import get_args_parser

    return Hydra.format_args_help(get_args_parser())


def sweeper_config_overrides(sweeper: Any) -> list[str]:
    """The sweep overrides the config itself sets (``hydra.sweeper.params``), as override texts;
    ``sweeper`` is a configured :func:`basic_sweeper_class` instance.

    Wraps ``BasicSweeper._parse_config()`` (hydra-core 1.3.8).
    """
    return sweeper._parse_config()
