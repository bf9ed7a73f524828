"""Serve the base and the trained (merged) model with vLLM and compare them on the test set.

Usage:
  python launch/serve_eval.py --run-dir logs/<sweep>/<NNN>_<slug> [--base MODEL] [--test-parquet F]
  python launch/serve_eval.py --base MODEL --trained DIR --test-parquet F --out DIR
  # against servers already running (keys in GRPOKIT_EVAL_BASE_KEY / GRPOKIT_EVAL_TRAINED_KEY):
  python launch/serve_eval.py --base-url http://h:p/v1 --base-name base --trained-url ... --trained-name ...

Defaults from the run folder: trained model <run>/hf (grpokit merge), base model and test file
from <run>/point.json (verl's actor_rollout_ref.model.path and data.val_files as the point ran them).
Both servers share one GPU (0.4 of its memory each) when only one is visible. Writes
<out>/eval_summary.json (accuracy of each), answers.jsonl and disagreements.jsonl (the questions
where their scores differ).
This is also the body of slurm/serve_eval.sbatch and of the chained job's ``eval`` step
(:mod:`grpokit.evaluation.chained_job` runs ``python -m grpokit.evaluation.serve_compare``);
``grpokit serve-eval`` (:mod:`grpokit.cli.serve_eval`) is this module's command.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
from contextlib import ExitStack
from pathlib import Path

from grpokit.config.field_help import field_help
from grpokit.config.point import PointSpec
from grpokit.config.schema import ChainConf
from grpokit.run_folder import RunFolder
from grpokit.run_folder.layout import EVAL_SERVERS_DIR
from grpokit.serving import vllm
from grpokit.slurm.gpus import visible_gpus

log = logging.getLogger(__name__)


def point_defaults(run_dir: Path) -> dict[str, str | None]:
    """Base model and test file of the point in ``run_dir``, from its ``point.json``.

    Returns ``{"base": actor_rollout_ref.model.path (else the model section's path),
    "test_parquet": the first of data.val_files}``, values None where the point has none.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``point.json`` (not a run folder of the kit).
    """
    path = RunFolder(run_dir).point
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: pass a run folder (logs/<sweep>/<NNN>_<slug>) of a submitted point")
    spec = PointSpec.from_json(path.read_text())
    base = spec.verl_value("actor_rollout_ref.model.path") or (spec.model or {}).get("path")
    return {"base": str(base) if base else None, "test_parquet": first_file(spec.verl_value("data.val_files"))}


def first_file(value: str | None) -> str | None:
    """data.val_files may be a list literal ``[a,b]``: the first file."""
    if not value:
        return None
    return value.strip("[]").split(",")[0].strip().strip("'\"") or None


def free_ports(n: int) -> list[int]:
    """Ports from the kit's node-wide registry (grpokit.runtime.processes.ports), else bind-to-0 ports."""
    try:
        from grpokit.runtime.processes.ports import reserve_ports

        return reserve_ports(n, host="127.0.0.1")
    except ImportError:  # pragma: no cover - the registry ships with the kit
        ports = []
        for _ in range(n):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        return ports


def server_argv(template: str | None, spec: vllm.VllmServe) -> list[str]:
    """``vllm serve``'s argv for ``spec``, or ``template`` (a JSON list, ``--server-command``) filled in
    with ``{python}``, ``{model}``, ``{name}``, ``{host}``, ``{port}`` (a first word ``python`` is this
    interpreter). Raises ValueError when the template is not a JSON list of strings."""
    if not template:
        return spec.command()
    try:
        parts = json.loads(template)
    except json.JSONDecodeError:
        parts = None
    if not isinstance(parts, list) or not parts or not all(isinstance(x, str) for x in parts):
        raise ValueError(f"--server-command {template!r}: expected a JSON list of strings, e.g. '[\"python\", ...]'")
    fields = {
        "python": sys.executable,
        "model": spec.model,
        "name": spec.served_model_name,
        "host": spec.host,
        "port": spec.port,
    }
    argv = [part.format(**fields) for part in parts]
    return [sys.executable, *argv[1:]] if argv[0] == "python" else argv


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", type=Path, default=None)
    p.add_argument("--base", default=None, help="base model path/name (default from point.json)")
    p.add_argument("--trained", default=None, help="trained HF folder (default <run>/hf)")
    p.add_argument("--test-parquet", default=None, help="test parquet (default data.val_files of point.json)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default <run>/eval)")
    p.add_argument("--limit", type=int, default=None, help="first N test rows only")
    p.add_argument("--max-tokens", type=int, default=ChainConf.max_tokens, help=field_help(ChainConf)["max_tokens"])
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--reward", default=None, help="module:function (verl compute_score); default verl's gsm8k")
    p.add_argument("--base-url", default=None, help="use a running server for the base model")
    p.add_argument("--base-name", default="base", help="served model name of the base model")
    p.add_argument("--trained-url", default=None, help="use a running server for the trained model")
    p.add_argument("--trained-name", default="trained", help="served model name of the trained model")
    p.add_argument("--ready-timeout", type=float, default=900.0, help="seconds to wait for vLLM")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument(
        "--server-command",
        default=None,
        help="JSON list: a command template run instead of vllm serve ({python}, {model}, {name}, {host}, "
        "{port}; key in VLLM_API_KEY), e.g. for a test double",
    )
    return p.parse_args(argv)


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill defaults from the run folder; raises ValueError naming what is missing."""
    defaults = point_defaults(args.run_dir) if args.run_dir else {}
    if args.run_dir and args.trained is None and args.trained_url is None:
        hf = RunFolder(args.run_dir).hf
        args.trained = str(hf)
        if not (hf / "config.json").exists():
            raise ValueError(f"{hf} has no merged model: run grpokit merge {args.run_dir}")
    args.base = args.base or defaults.get("base")
    args.test_parquet = args.test_parquet or defaults.get("test_parquet")
    args.out = args.out or (RunFolder(args.run_dir).eval if args.run_dir else None)
    missing = [name for name, v in (("--test-parquet", args.test_parquet), ("--out", args.out)) if not v]
    if args.base_url is None and not args.base:
        missing.append("--base (or --base-url)")
    if args.trained_url is None and not args.trained:
        missing.append("--trained or --run-dir (or --trained-url)")
    if missing:
        raise ValueError(f"missing {', '.join(missing)}; pass them or a --run-dir whose point.json has them")
    return args


def run(args: argparse.Namespace) -> dict[str, Path]:
    """Start what is not already running, evaluate both, stop what was started; returns written paths."""
    from grpokit.evaluation import compare as evaluation  # verl's scorer loads torch: after parsing (fast --help)

    items = evaluation.load_items(args.test_parquet, args.limit)
    scorer = evaluation.load_scorer(args.reward)
    to_start = [
        (n, m)
        for n, m, url in (("base", args.base, args.base_url), ("trained", args.trained, args.trained_url))
        if url is None
    ]
    placement = vllm.place(len(to_start), visible_gpus(probe=True))
    ports = free_ports(len(to_start)) if to_start else []
    endpoints: dict[str, evaluation.Endpoint] = {}
    if args.base_url:
        endpoints["base"] = evaluation.Endpoint(
            "base", args.base_url, os.environ.get("GRPOKIT_EVAL_BASE_KEY", ""), args.base_name
        )
    if args.trained_url:
        endpoints["trained"] = evaluation.Endpoint(
            "trained", args.trained_url, os.environ.get("GRPOKIT_EVAL_TRAINED_KEY", ""), args.trained_name
        )
    with ExitStack() as stack:
        started = []
        for (name, model), port, gpu in zip(to_start, ports, placement, strict=True):
            spec = vllm.VllmServe(
                model=model,
                served_model_name=name,
                host="127.0.0.1",
                port=port,
                dtype="bfloat16",
                gpu_memory_utilization=args.gpu_memory_utilization,
                max_model_len=args.max_model_len,
                max_num_seqs=args.concurrency,
            )
            key = vllm.new_key()
            log_path = args.out / EVAL_SERVERS_DIR / f"{name}.log"
            argv = server_argv(args.server_command, spec)
            proc = vllm.start(argv, log_path, vllm.server_env(os.environ, key, cuda_devices=gpu))
            stack.callback(vllm.stop, proc, name=f"vLLM server {name}")
            started.append((spec, key, proc, log_path))
            endpoints[name] = evaluation.Endpoint(name, spec.base_url, key, name)
            log.info("started vLLM for %s (%s) on port %d, GPU %s", name, model, port, gpu)
        for spec, key, proc, log_path in started:  # both load at once; wait for each
            name = spec.served_model_name
            secs = vllm.wait_ready(f"{spec.base_url}/models", key, proc, args.ready_timeout, log_path, name=name)
            log.info("%s ready after %.0f s", name, secs)
        answers = {
            name: evaluation.answer_all(endpoints[name], items, args.max_tokens, args.concurrency)
            for name in ("base", "trained")
        }
    result = evaluation.compare(items, answers, scorer)
    paths = evaluation.write_results(result, [endpoints["base"], endpoints["trained"]], args.out)
    for name, acc in result["accuracy"].items():
        print(f"{name}: accuracy {acc:.4f} on {result['n']} questions")
    print(f"disagreements: {len(result['disagreements'])} -> {paths['disagreements']}")
    return paths


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Slurm's SIGTERM (time limit, scancel) must unwind the ExitStack so both servers are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        args = resolve(parse_args(argv))
        run(args)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
