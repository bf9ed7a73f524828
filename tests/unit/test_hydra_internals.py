"""Every wrapper of Hydra's and OmegaConf's private API (grpokit.config.hydra_internals) still works on
the installed versions, and no other module of src/ touches those internals itself.

After a Hydra or OmegaConf upgrade a failure here reads "hydra-core X changed <internal>; update
config/hydra_internals.py" (or "omegaconf X changed ..."): the one module to change.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
from pathlib import Path

import hydra
import omegaconf
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, ListConfig, Node, OmegaConf

from grpokit.config import hydra_internals as hi

SRC = Path(__file__).resolve().parents[2] / "src"
HOME = SRC / "grpokit" / "config" / "hydra_internals.py"


@contextlib.contextmanager
def changed(library: str, internal: str):
    """Any failure inside the block is reported as ``<library> <version> changed <internal>``."""
    version = {"hydra-core": hydra.__version__, "omegaconf": omegaconf.__version__}[library]
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - any breakage of the internal is the same verdict
        pytest.fail(
            f"{library} {version} changed {internal}; update config/hydra_internals.py "
            f"({type(exc).__name__}: {exc})",
            pytrace=False,
        )


def _cfg() -> DictConfig:
    return OmegaConf.create(
        {"a": {"b": "${c}", "m": "???", "n": None, "l": [1, "${c}"], "e": {}, "gone": 3}, "c": 1, "d": "${a}"}
    )


def test_child_node_gives_the_unresolved_node_or_none():
    cfg = _cfg()
    with changed("omegaconf", "Container._get_node"):
        a = hi.child_node(cfg, "a")
        assert isinstance(a, DictConfig)
        b = hi.child_node(a, "b")
        assert isinstance(b, Node) and OmegaConf.is_interpolation(b)
        assert hi.child_node(a, "absent") is None
        assert isinstance(hi.child_node(a, "m"), Node)  # ??? gives its node, no error
        assert isinstance(hi.child_node(a, "l"), ListConfig)
        d = hi.child_node(cfg, "d")
        assert isinstance(d, Node) and OmegaConf.is_interpolation(d)  # an interpolated mapping: not followed


def test_raw_value_gives_the_value_as_written():
    cfg = _cfg()
    a = cfg._get_node("a")  # the public way to reach the node is what is under test
    with changed("omegaconf", "Node._value"):
        assert hi.raw_value(a._get_node("b")) == "${c}"
        assert hi.raw_value(a._get_node("m")) == "???"
        assert hi.raw_value(a._get_node("n")) is None
        assert hi.raw_value(cfg._get_node("c")) == 1
        content = hi.raw_value(a)
        assert isinstance(content, dict) and set(content) == {"b", "m", "n", "l", "e", "gone"}
        assert hi.raw_value(a._get_node("e")) == {}
        assert isinstance(hi.raw_value(a._get_node("l")), list)
        assert hi.raw_value(cfg._get_node("d")) == "${a}"


def test_apply_overrides_is_hydras_override_step():
    cfg = _cfg()
    OmegaConf.set_struct(cfg, True)  # as Hydra composes it
    parsed = OverridesParser.create().parse_overrides(["a.b=2", "+a.new=x", "++c=5", "~a.gone"])
    with changed("hydra-core", "ConfigLoaderImpl._apply_overrides_to_config"):
        hi.apply_overrides(cfg, parsed)
        assert cfg.a.b == 2 and cfg.a.new == "x" and cfg.c == 5 and "gone" not in cfg.a
        with pytest.raises(ConfigCompositionException, match="absent"):
            hi.apply_overrides(cfg, OverridesParser.create().parse_overrides(["absent=1"]))


def test_memoised_interpolation_parse_caches_and_restores():
    import omegaconf.base
    import omegaconf.grammar_parser

    original = omegaconf.grammar_parser.parse
    cfg = OmegaConf.create({"x": 1, "y": "${x}", "z": "${x}"})
    with changed("omegaconf", "omegaconf.base.parse / omegaconf._utils.parse (omegaconf.grammar_parser.parse)"):
        with hi.memoised_interpolation_parse():
            memo = omegaconf.base.parse
            assert memo is not original and hasattr(memo, "cache_info")
            with hi.memoised_interpolation_parse():  # nested: the outer block's cache
                assert omegaconf.base.parse is memo
            assert (cfg.y, cfg.z, cfg.y) == (1, 1, 1)
            assert memo.cache_info().hits >= 1, "OmegaConf no longer parses interpolations through base.parse"
        assert omegaconf.base.parse is original


def test_mode_not_composed_answers_none_and_restores():
    from hydra._internal import utils
    from hydra._internal.hydra import Hydra

    with changed("hydra-core", "Hydra.get_mode"):
        original = Hydra.get_mode
        assert list(inspect.signature(original).parameters) == ["self", "config_name", "overrides"]
        assert ".get_mode(" in inspect.getsource(utils._run_hydra), "_run_hydra no longer asks get_mode"
        with hi.mode_not_composed():
            assert Hydra.get_mode(object(), config_name="config", overrides=["a=1"]) is None
        assert Hydra.get_mode is original


def test_hydra_flags_help_lists_hydras_flags():
    with changed("hydra-core", "hydra._internal.utils.get_args_parser / Hydra.format_args_help"):
        text = hi.hydra_flags_help()
        assert "--multirun" in text and "--cfg" in text and "--hydra-help" in text


def test_basic_sweeper_and_its_config_overrides():
    with changed("hydra-core", "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"):
        cls = hi.basic_sweeper_class()
        for name in ("split_arguments", "get_job_batch", "is_done", "validate_batch_is_legal", "sweep", "setup"):
            assert callable(getattr(cls, name)), f"BasicSweeper.{name} is gone"
        sweeper = cls(max_batch_size=None, params={"a.b": "1,2", "c": "x"})
    with changed("hydra-core", "BasicSweeper._parse_config"):
        assert hi.sweeper_config_overrides(sweeper) == ["a.b=1,2", "c=x"]


def test_the_kits_sweeper_still_subclasses_hydras():
    from hydra_plugins.grpokit_launcher.grpokit_sweeper import GrpokitSweeper

    assert issubclass(GrpokitSweeper, hi.basic_sweeper_class())


# ---- no other module touches the internals ----

_PRIVATE_MODULES = ("omegaconf.base", "omegaconf.basecontainer", "omegaconf.grammar_parser", "omegaconf.nodes")


def _private_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] in ("hydra", "omegaconf") and (
        any(p.startswith("_") for p in parts) or any(name == m or name.startswith(m + ".") for m in _PRIVATE_MODULES)
    )


def _private_members() -> set[str]:
    """The ``_name`` members of OmegaConf's node classes and of the Hydra classes the kit wraps."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra
    from omegaconf import Container
    from omegaconf.basecontainer import BaseContainer
    from omegaconf.nodes import AnyNode, ValueNode

    names = {"_content", "_metadata", "_parent", "_flags_cache", "_val"}
    classes = (DictConfig, ListConfig, Node, Container, BaseContainer, ValueNode, AnyNode, Hydra, ConfigLoaderImpl)
    for cls in (*classes, hi.basic_sweeper_class()):
        names |= {n for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
    return names


def private_sites(text: str, where: str, members: set[str]) -> list[str]:
    """``where:line code`` of each import of a private Hydra/OmegaConf module and each use of a private
    member of theirs (by name, on anything but the kit's own ``self``) in the Python ``text``."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Attribute) and node.attr in members:
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                continue  # the kit's own attribute of the same name
            names = ["." + node.attr]
        else:
            continue
        if any(n.startswith(".") or _private_module(n) for n in names):
            out.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return sorted(out)


def test_no_other_module_touches_hydra_or_omegaconf_internals():
    members = _private_members()
    sites = [
        s
        for path in sorted(SRC.rglob("*.py"))
        if path != HOME and "__pycache__" not in path.parts
        for s in private_sites(path.read_text(), str(path.relative_to(SRC)), members)
    ]
    assert sites == [], (
        "private Hydra/OmegaConf API outside grpokit/config/hydra_internals.py (use a public API, or add "
        "a wrapper there):\n" + "\n".join(sites)
    )


def test_the_scan_sees_what_it_bans():
    text = (
        "from hydra._internal.hydra import Hydra\n"
        "import omegaconf.base\n"
        "x = cfg._get_node('a')._value()\n"
        "self._content = 1\n"
        "from hydra.core.override_parser.overrides_parser import OverridesParser\n"
    )
    assert private_sites(text, "probe", _private_members()) == [
        "probe:1 from hydra._internal.hydra import Hydra",
        "probe:2 import omegaconf.base",
        "probe:3 cfg._get_node",
        "probe:3 cfg._get_node('a')._value",
    ]
