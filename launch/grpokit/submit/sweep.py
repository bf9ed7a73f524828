"""compose -> build points -> validate all -> dry run | submit one Slurm array | run locally -> manifest."""

from __future__ import annotations

import copy
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from grpokit.config.point import PointSpec, build_point, kit_notices
from grpokit.paths import CONFIG_DIR
from grpokit.submit.manifest import write_manifest
from grpokit.submit.task import RunPointTask
from grpokit.validate import Problem, SweepValidationError, validate_points

log = logging.getLogger(__name__)


def _parse(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def swept_keys(job_overrides: list[list[str]]) -> list[str]:
    """Keys whose value differs between points, in command-line order."""
    values: dict[str, set[str]] = {}
    order: list[str] = []
    for overrides in job_overrides:
        for o in overrides:
            k, v = _parse(o)
            if k not in values:
                values[k] = set()
                order.append(k)
            values[k].add(v)
    return [k for k in order if len(values[k]) > 1]


def build_points(config: DictConfig, load, job_overrides: list[list[str]], first_index: int = 0) -> list[PointSpec]:
    """One :class:`PointSpec` per point; ``load(overrides)`` composes a point's kit config."""
    keys = swept_keys(job_overrides)
    specs = []
    for i, overrides in enumerate(job_overrides):
        cfg = load(overrides)
        swept = dict(_parse(o) for o in overrides if _parse(o)[0] in keys)
        specs.append(build_point(cfg, index=first_index + i, kit_overrides=overrides, swept=swept))
    return specs


def check_picklable(specs: list[PointSpec]) -> None:
    """What submitit will pickle must pickle now, not fail after submission (hydra#3038)."""
    import cloudpickle

    problems = []
    for spec in specs:
        for what, obj in (("the task", RunPointTask()), ("the point spec", spec.to_json())):
            try:
                cloudpickle.dumps(obj)
            except Exception as exc:
                problems.append(
                    Problem(
                        spec.name,
                        what,
                        f"cannot be pickled: {type(exc).__name__}: {exc}",
                        "keep only plain values (str, numbers, lists, dicts) in the config",
                    )
                )
    if problems:
        raise SweepValidationError(problems)


def write_dry_run(sweep_dir: Path, specs: list[PointSpec], cluster: dict[str, Any]) -> Path:
    """``dry_run.md``: per point, the verl command line and the Slurm request."""
    from grpokit.config.explicit import data_caps
    from grpokit.runtime import trainer
    from grpokit.submit.arrays import dry_run_section

    lines = [f"# Dry run of sweep {specs[0].sweep_name}: {len(specs)} point(s), nothing submitted", ""]
    lines += [f"Note: {notice}\n" for notice in kit_notices(specs)]  # what the kit changed on its own
    lines += dry_run_section(specs)  # one array per request and MaxArraySize, as submit_slurm sends them
    for spec in specs:
        cmd = trainer.command(spec, [])
        caps = data_caps(spec)
        lines += [f"## {spec.name}", f"run folder: {spec.run_dir}", *([caps] if caps else []), ""]
        lines += ["```", " \\\n  ".join(cmd), "```", ""]
    path = sweep_dir / "dry_run.md"
    path.write_text("\n".join(lines))
    return path


def submit_slurm(sweep_dir: Path, specs: list[PointSpec], cluster: dict[str, Any]) -> list[str]:
    """Submit every point (one job array per request and ``MaxArraySize``); returns the Slurm ids.

    A submission Slurm refuses ends the command (exit 2) with one line saying what Slurm said and
    what to change; nothing stays queued, and the sweep folder is left as it was before the
    submission (a new one is removed, see :func:`grpokit.submit.arrays.after_refusal`).
    """
    from grpokit.submit.arrays import SubmissionError, after_refusal, submit_arrays

    try:
        return submit_arrays(sweep_dir / "submitit", specs, name=specs[0].sweep_name)
    except SubmissionError as exc:
        print(f"{exc}; {after_refusal(sweep_dir, specs, exc)}", file=sys.stderr)
        raise SystemExit(2) from None


def run_local(specs: list[PointSpec]) -> list[int]:
    """Run points one after another on this machine (a workstation's GPU holds one at a time)."""
    codes = []
    for spec in specs:
        Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
        point_file = Path(spec.run_dir) / "point.json"
        point_file.write_text(spec.to_json())
        log.info("running %s locally", spec.name)
        codes.append(subprocess.call([sys.executable, "-m", "grpokit.runtime.driver", str(point_file)]))
    return codes


def wait_for(specs: list[PointSpec], poll_s: float = 5.0) -> None:
    """Block until every point's ``status.json`` is final (the sweep's ``wait=true``)."""
    from grpokit.runtime.status import FINAL_STATES, read_status

    while True:
        states = [read_status(Path(s.run_dir)).get("state") for s in specs]
        if all(st in FINAL_STATES for st in states):
            return
        time.sleep(poll_s)


def point_loader(full_load, first: list[str]):
    """``load(overrides) -> kit config`` that composes the first point fully and derives the others.

    A point that differs from the first only in values (not in config groups such as
    ``experiment=``) is the first point's config with its own values applied by Hydra's override
    step; composing the whole defaults list again per point made validation of large sweeps slow.
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    base = full_load(first)
    groups = {p.name for p in CONFIG_DIR.iterdir() if p.is_dir()}

    def load(overrides: list[str]) -> DictConfig:
        # `+key=v` of this point adds a key the first point added too: on its config it is a
        # force-add (`++`), as composing this point from scratch would have made it.
        diff = ["+" + o if o.startswith("+") and not o.startswith("++") else o for o in overrides if o not in first]
        parsed = parser.parse_overrides(diff)
        if any(o.key_or_group.split("/")[0] in groups or o.key_or_group.startswith("hydra") for o in parsed):
            return full_load(overrides)
        cfg = copy.deepcopy(base)
        ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
        return cfg

    return load


def launch_sweep(
    config: DictConfig, hydra_context, job_overrides: list[list[str]], first_index: int
) -> list[JobReturn]:
    """The launcher's body (see :mod:`hydra_plugins.grpokit_launcher.grpokit_launcher`)."""
    load = point_loader(lambda o: hydra_context.config_loader.load_sweep_config(config, list(o)), job_overrides[0])

    started = time.monotonic()
    specs = build_points(config, load, job_overrides, first_index)
    try:
        validate_points(specs)
        check_picklable(specs)
    except SweepValidationError as exc:
        print(str(exc), file=sys.stderr)
        raise SystemExit(2) from None
    log.info("validated %d point(s) in %.1f s", len(specs), time.monotonic() - started)
    first = load(job_overrides[0])
    cluster = OmegaConf.to_container(first.cluster, resolve=True)
    sweep_dir = Path(specs[0].run_dir).parent
    sweep_dir.mkdir(parents=True, exist_ok=True)
    keys = swept_keys(job_overrides)
    meta = {"experiment": str(first.experiment.name), "cluster": str(cluster.get("kind")), "swept_keys": keys}
    if bool(first.dry_run):
        path = write_dry_run(sweep_dir, specs, cluster)
        write_manifest(sweep_dir, specs, [None] * len(specs), **meta)
        print(path.read_text())
        print(f"dry run: {len(specs)} point(s) validated, nothing submitted; see {path}")
        return [_job_return(s, None) for s in specs]
    for notice in kit_notices(specs):  # what the kit changed on its own, once per sweep (dry_run.md has it too)
        print(f"note: {notice}")
    if cluster.get("kind") == "slurm":
        # The manifest exists before the jobs do: a sweep command killed mid-submission leaves its
        # points (and run folders) findable; the Slurm ids are filled in right after.
        write_manifest(sweep_dir, specs, [None] * len(specs), **meta)
        job_ids = submit_slurm(sweep_dir, specs, cluster)
        write_manifest(sweep_dir, specs, job_ids, **meta)
        print(f"submitted {len(specs)} point(s) as Slurm array {job_ids[0].split('_')[0]}; sweep folder {sweep_dir}")
        print(f"  watch: python launch/status.py {sweep_dir} --watch")
        if bool(first.get("wait", False)):
            wait_for(specs)
        return [_job_return(s, j) for s, j in zip(specs, job_ids, strict=True)]
    write_manifest(sweep_dir, specs, [None] * len(specs), **meta)
    codes = run_local(specs)
    print(f"ran {len(specs)} point(s) locally; sweep folder {sweep_dir}")
    return [_job_return(s, c) for s, c in zip(specs, codes, strict=True)]


def _job_return(spec: PointSpec, value) -> JobReturn:
    ret = JobReturn(overrides=spec.kit_overrides, working_dir=spec.run_dir)
    ret.status = JobStatus.COMPLETED
    ret.return_value = value
    return ret
