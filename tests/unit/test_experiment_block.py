"""The experiments share one GRPO block (configs/experiment/_grpo.yaml) and compose to what they did
when each file carried its own copy.

``tests/data/experiments_composed.json`` was written from the experiment files as they were
before the shared block (each file with its ~35 lines of GRPO settings): per experiment, the
verl overrides the point emits for every key ``_grpo.yaml`` or the experiment's files set (absent:
verl's own default), and its ``experiment`` and ``sidecars`` sections. Composing each experiment
now must give the same values. After an intended change to an experiment, rewrite the file with
``python tests/unit/test_experiment_block.py --write`` and review its diff.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.paths import CONFIG_DIR, package_file

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "experiments_composed.json"
EXPERIMENTS = ("gsm8k_grpo", "memalpha_grpo", "memalpha_grpo_full", "tool_memory_grpo")
# fixed roots (settings a user would not pass): the values must not depend on this checkout's place
FIXED = ["model=tiny", "repo_root=/R", "logs_root=/L", "sweep_name=s"]


def _leaves(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1]


def experiment_keys(name: str) -> set[str]:
    """The verl keys ``name``'s file, the files it extends and ``_grpo.yaml`` set."""
    keys: set[str] = set()
    pending = [name]
    while pending:
        text = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "experiment" / f"{pending.pop()}.yaml"))
        keys |= set(_leaves(text.get("verl") or {}))
        pending += [d for d in text.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    return keys


def composed(name: str) -> dict:
    overrides = [f"experiment={name}", *FIXED]
    spec = build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})
    keys = experiment_keys(name)
    verl = {o for o in spec.verl_overrides if o.lstrip("+").split("=", 1)[0] in keys}
    out = {"verl": sorted(verl), "experiment": spec.experiment, "sidecars": json.loads(spec.to_json())["sidecars"]}
    return json.loads(json.dumps(out, default=str).replace(str(package_file(".")).rstrip("/."), "<pkg>"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_each_experiment_composes_as_before_the_shared_block(name):
    want = json.loads(GOLDEN.read_text())[name]
    got = composed(name)
    assert got["verl"] == want["verl"], sorted(set(got["verl"]) ^ set(want["verl"]))
    assert got["experiment"] == want["experiment"]
    # sidecars: the keys written in the files, with their values (the schema adds its defaults)
    assert {n: {k: s[k] for k in want["sidecars"][n]} for n, s in got["sidecars"].items()} == want["sidecars"]


def test_the_shared_block_is_used_by_every_experiment():
    for name in EXPERIMENTS:
        assert "algorithm.adv_estimator" in experiment_keys(name)
    shared = OmegaConf.load(CONFIG_DIR / "experiment" / "_grpo.yaml")
    assert shared.verl.algorithm.adv_estimator == "grpo"
    for name in ("gsm8k_grpo", "memalpha_grpo", "tool_memory_grpo"):  # each file lists it, none copies it
        text = OmegaConf.load(CONFIG_DIR / "experiment" / f"{name}.yaml")
        assert "_grpo" in list(text.defaults) and "algorithm" not in text.verl


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps({n: composed(n) for n in EXPERIMENTS}, indent=1, sort_keys=True) + "\n")
