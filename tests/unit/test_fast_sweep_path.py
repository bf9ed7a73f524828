"""The sweep's fast path (one config per sweep, each point's values applied in place) equals composing
every point on its own; what it changes in place is put back. Issue 14.5."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from grpokit.config.compose import compose_kit
from grpokit.config.override_step import Workspace, cached_interpolation_parsing
from grpokit.config.overrides import flat_base
from grpokit.config.point import build_point
from grpokit.config.verl_schema import apply_overrides


def _plain(cfg):
    return OmegaConf.to_container(cfg, resolve=False)


def test_verl_workspace_points_equal_their_own_composition(base):
    # 512 and 1 are verl's defaults for max_response_length / rollout.n in some points: those points
    # leave the key out of their overrides (a key set other than the first point's)
    points = [
        [f"verl.data.max_response_length={r}", f"verl.actor_rollout_ref.rollout.n={n}", "verl.data.train_batch_size=8"]
        for r in (256, 512, 1024)
        for n in (1, 4)
    ]
    specs = [build_point(compose_kit([*base, *p]), index=i, kit_overrides=p, swept={}) for i, p in enumerate(points)]
    first = apply_overrides(specs[0].verl_overrides)
    before = _plain(first)
    ws = Workspace(first, specs[0].verl_overrides, defaults=flat_base())
    key_sets = {frozenset(o.split("=", 1)[0] for o in s.verl_overrides) for s in specs}
    assert len(key_sets) > 1, "the grid must hold points that leave a key at verl's default"
    for spec in specs:
        delta = ws.delta(spec.verl_overrides)
        assert delta is not None, spec.verl_overrides
        with ws.point(delta) as cfg:
            assert _plain(cfg) == _plain(apply_overrides(spec.verl_overrides)), spec.name
    assert _plain(ws.cfg) == before  # the first point's values are back


def test_workspace_restores_after_a_value_that_does_not_fit(base):
    spec = build_point(compose_kit(base), index=0, kit_overrides=[], swept={})
    first = apply_overrides(spec.verl_overrides)
    before = _plain(first)
    ws = Workspace(first, spec.verl_overrides, defaults=flat_base())
    others = [o for o in spec.verl_overrides if not o.startswith("data.train_batch_size=")]
    delta = ws.delta([*others, "data.train_batch_size=3"])
    assert delta is not None and delta.texts == ["data.train_batch_size=3"]
    delta.texts.append("data.train_batch_size.per_gpu=1")  # below an int: Hydra's override step refuses it
    with pytest.raises(Exception, match="data.train_batch_size.per_gpu"), ws.point(delta):
        pass
    assert _plain(ws.cfg) == before


def test_kit_points_from_the_loader_equal_their_full_composition(base):
    from grpokit.submit.points import PointLoader

    points = [[*base, f"verl.data.train_batch_size={b}", f"+runtime.env.PROFILE={p}"] for b, p in ((8, "a"), (16, "b"))]
    points.append([*base, "verl.data.train_batch_size=32", "+runtime.env.PROFILE=c", "hardware=h200"])
    loader = PointLoader(compose_kit, points[0])
    for overrides in [*points, points[0]]:
        with loader.point(overrides) as cfg:
            fast, full = _plain(cfg), _plain(compose_kit(overrides))
        fast.pop("hydra"), full.pop("hydra")  # Hydra's own bookkeeping (the override list) differs
        assert fast == full


def test_interpolation_parsing_cache_is_scoped_and_gives_the_same_values(base):
    import omegaconf.base
    import omegaconf.grammar_parser

    cfg = compose_kit(base)
    plain = OmegaConf.to_container(cfg.verl.data, resolve=True)
    with cached_interpolation_parsing():
        assert omegaconf.base.parse is not omegaconf.grammar_parser.parse
        assert OmegaConf.to_container(cfg.verl.data, resolve=True) == plain
        assert OmegaConf.to_container(cfg.verl.data, resolve=True) == plain
    assert omegaconf.base.parse is omegaconf.grammar_parser.parse


def test_a_sweep_with_one_bad_point_names_it_and_only_it(base):
    from grpokit.submit.points import PointLoader, build_points
    from grpokit.validate import SweepValidationError, validate_points

    # verl's validate_config: train_batch_size x rollout.n must divide by the trainer's GPUs (2 here)
    points = [
        [*base, "cluster.gpus_per_node=2", f"verl.data.train_batch_size={b}", "verl.actor_rollout_ref.rollout.n=1"]
        for b in (8, 7, 16)
    ]
    specs = build_points(None, PointLoader(compose_kit, points[0]), points)
    with pytest.raises(SweepValidationError) as err:
        validate_points(specs)
    text = str(err.value)
    assert specs[1].name in text and specs[0].name not in text and specs[2].name not in text


def test_a_command_without_a_mode_is_a_one_point_sweep():
    from grpokit.cli.sweep import as_sweep

    assert as_sweep(["model=tiny", "dry_run=true"]) == ["-m", "model=tiny", "dry_run=true"]
    for mode in (["-m", "a=1,2"], ["--cfg", "job"], ["--cfg=job"], ["--info"], ["-c", "hydra"]):
        assert as_sweep(mode) == mode  # Hydra's own modes are left as typed (one mode at most)


_VALIDATOR = """
import json, os, signal, sys
from grpokit.validate import SweepValidationError, check_each, check_stream, overlap, validate_points
from grpokit.config.compose import compose_kit
from grpokit.submit.points import PointLoader, build_points

assert overlap._workers() >= 2, "this test needs two cores or more (the machines CI runs on have two)"
assert overlap.start(check_stream)  # as `grpokit sweep` does: fork before composing
points = json.loads(sys.argv[1])
specs = build_points(None, PointLoader(compose_kit, points[0]), points, on_point=overlap.feed)  # streamed
problems, _printed = overlap.take(specs)
mine = check_each(specs)
assert problems == mine and [p.point for p in problems] == [specs[1].name, specs[2].name], (problems, mine)
assert overlap.take(specs) is None  # one request per validator: a second call validates itself

assert overlap.start(check_stream)
for spec in specs:
    overlap.feed(spec)
assert overlap.take(specs[:2]) is None  # not the points fed: no answer (the command validates itself)

assert overlap.start(check_stream)
os.kill(overlap._current.pid, signal.SIGKILL)  # the first worker dies (before forking the second)
try:
    validate_points(specs)  # no answer from the workers: validated here, the same problems
    raise SystemExit("no problem found")
except SweepValidationError as err:
    assert specs[1].name in str(err) and specs[0].name not in str(err), str(err)
print("ok")
"""


def test_the_forked_validator_finds_what_the_command_finds_itself_and_a_dead_one_changes_nothing(base):
    # A fresh interpreter, as the command: overlap.start forks only a process with one thread, and
    # this pytest process runs others. Points 1 and 2 fail verl's validate_config (7 x 1 on 2 GPUs);
    # with two workers they are checked by different processes and must come back in point order.
    import json
    import subprocess
    import sys

    points = [
        [*base, "cluster.gpus_per_node=2", f"verl.data.train_batch_size={b}", "verl.actor_rollout_ref.rollout.n=1"]
        for b in (8, 7, 7, 16)
    ]
    out = subprocess.run(
        [sys.executable, "-c", _VALIDATOR, json.dumps(points)], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_verl_defaults_cache_is_keyed_by_verls_config_files(tmp_path, monkeypatch):
    import shutil

    from grpokit.config import verl_schema

    monkeypatch.setenv("GRPOKIT_CACHE_DIR", str(tmp_path / "cache"))
    verl_schema.verl_base.cache_clear()
    try:
        cached_first = verl_schema.verl_base()  # composed, then written
        files = list((tmp_path / "cache").glob("verl_defaults-*.pickle"))
        assert len(files) == 1
        verl_schema.verl_base.cache_clear()
        from_disk = verl_schema.verl_base()
        composed = verl_schema.compose_verl([])
        assert _plain(from_disk) == _plain(composed) == _plain(cached_first)
        assert OmegaConf.is_struct(from_disk) == OmegaConf.is_struct(composed)
        files[0].write_bytes(b"truncated")  # an unreadable cache is recomposed, not an error
        verl_schema.verl_base.cache_clear()
        assert _plain(verl_schema.verl_base()) == _plain(composed)
    finally:
        verl_schema.verl_base.cache_clear()
    # any change to verl's config folder (an upgrade, an edited YAML) gives another key
    copy = tmp_path / "config"
    shutil.copytree(verl_schema.verl_config_dir(), copy)
    key = verl_schema.defaults_key(copy)
    assert key == verl_schema.defaults_key(verl_schema.verl_config_dir())
    yaml = copy / "ppo_trainer.yaml"
    yaml.write_text(yaml.read_text() + "\n# edited\n")
    assert verl_schema.defaults_key(copy) != key
    (copy / "new.yaml").write_text("a: 1\n")
    assert len({key, verl_schema.defaults_key(copy)}) == 2


def test_verl_config_dir_does_not_import_verl():
    import subprocess
    import sys

    code = (
        "import sys; from grpokit.config.verl_schema import verl_config_dir; d = verl_config_dir(); "
        "assert (d / 'ppo_trainer.yaml').is_file(), d; assert 'verl' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
