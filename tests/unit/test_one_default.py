"""One default per setting: the typed dataclasses of grpokit.config.schema hold the only default of
each kit setting; the YAML files name only what differs from them (issue: the YAML restated 14
RuntimeConf, 6 PruningRules and 9 ClusterConf defaults and won over the dataclasses, so changing a
dataclass default did nothing for real sweeps while hand-built points saw it)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from grpokit.config.compose import compose_kit
from grpokit.config.schema import ChainConf, ClusterConf, HalvingConf, PruningRules, RuntimeConf, _LocalClusterSchema
from grpokit.paths import CONFIG_DIR

SECTIONS = {"runtime": RuntimeConf, "chain": ChainConf, "halving": HalvingConf}


def _default(field: dataclasses.Field):
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return field.default


def _fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]


def _raw(path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


@pytest.fixture(scope="module")
def composed():
    """The default config (cluster=local) and the Slurm one, composed as a sweep point would be."""
    return {c: compose_kit([f"cluster={c}"]) for c in ("local", "slurm", "slurm_local")}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_composed_section_is_the_dataclass_default_for_every_field(composed, section):
    from omegaconf import OmegaConf

    cls = SECTIONS[section]
    got = OmegaConf.to_container(composed["local"][section], resolve=True)
    for field in _fields(cls):
        assert got[field.name] == _default(field), f"{section}.{field.name}: YAML says {got[field.name]!r}"


def test_pruning_rules_default_is_the_dataclass(composed):
    from omegaconf import OmegaConf

    got = OmegaConf.to_container(composed["local"].runtime.pruning, resolve=True)
    assert got == dataclasses.asdict(PruningRules())


def test_cluster_files_name_only_what_differs_from_the_dataclass(composed):
    """Each cluster file's own keys differ from the dataclass default they extend; every key it does
    not name is the dataclass default."""
    from omegaconf import OmegaConf

    for name, schema in (("local", _LocalClusterSchema), ("slurm", ClusterConf), ("slurm_local", ClusterConf)):
        own = {k: v for k, v in _raw(CONFIG_DIR / "cluster" / f"{name}.yaml").items() if k != "defaults"}
        defaults = {f.name: _default(f) for f in _fields(schema)}
        restated = {k: v for k, v in own.items() if k in defaults and defaults[k] == v}
        assert not restated, f"cluster/{name}.yaml restates the dataclass defaults {restated}"
        got = OmegaConf.to_container(composed[name].cluster, resolve=True)
        for key, default in defaults.items():
            if key not in own:
                assert got[key] == default, (
                    f"cluster={name}: cluster.{key} is {got[key]!r}, not the default {default!r}"
                )


def test_root_config_restates_no_section_default():
    root = _raw(CONFIG_DIR / "config.yaml")
    for section in (*SECTIONS, "cluster"):
        assert section not in root or not root[section], f"configs/config.yaml sets {section}: {root[section]}"


def test_changing_a_dataclass_default_changes_the_composed_config(monkeypatch):
    """The dataclass is the default a real sweep sees: a changed field default reaches compose_kit."""
    field = RuntimeConf.__dataclass_fields__["kill_grace_s"]
    monkeypatch.setattr(field, "default", 42.0)
    from grpokit.config import schema

    try:
        assert compose_kit([]).runtime.kill_grace_s == 42.0
    finally:
        monkeypatch.undo()
        schema.register()
