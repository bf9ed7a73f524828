"""The rehearsal trainer: a stand-in for ``python -m verl.trainer.main_ppo`` on nodes without a GPU.

verl cannot train without a CUDA GPU. ``rehearse=true`` on the sweep command runs this module
instead (``python -m grpokit.rehearsal.rehearsal_trainer``, through ``runtime.trainer_cmd``), so a sweep's
whole Slurm path (arrays, sidecars, Ray, checkpoints, requeues, resubmission, reports) can be
rehearsed on CPU nodes before GPU hours are spent; the kit's own tests use it as their TEST DOUBLE of
verl's trainer (``tests/doubles/fake_verl_trainer.py`` re-exports it). Its metrics are made up
(marked ``rehearsal`` wherever they show). It follows the contracts of verl 0.9.1 that the kit
depends on:

- arguments: verl's Hydra overrides (``key=value`` / ``+key=value``), after ``--config-path <dir>``
  and ``--config-name <name>`` when the point runs another config than verl's ``ppo_trainer`` (a
  recipe's, Megatron's): that config is composed with Hydra as the recipe's entry would (verl's config
  folder on the search path) and its values stand where the overrides name none (:func:`config_defaults`);
- checkpoints under ``trainer.default_local_dir``: ``global_step_N/actor/{model,optim,extra_state}
  _world_size_W_rank_R.pt``, ``actor/fsdp_config.json``, ``actor/huggingface/config.json``, then
  ``global_step_N/data.pt``, then ``latest_checkpointed_iteration.txt`` written last with a plain
  write; saves at ``step % save_freq == 0`` and at the last step; every ``*.pt`` is a real torch
  file (torch.save's zip format, :func:`write_pt`: ``torch.load`` reads it) holding a small dict;
- ``resume_mode=auto``: reads the tracker and continues at N + 1;
- metrics: verl's file logger (``$VERL_FILE_LOGGER_PATH``, opened with mode "wb", one line
  ``{"step": N, "data": {...}}`` per step, verl's metric names) and TensorBoard (``$TENSORBOARD_DIR``),
  each only when ``trainer.logger`` names it (verl's default ``[console, wandb]`` names neither), the
  ``step:N - ...`` line only with ``console``; with ``wandb`` in it, verl's own
  ``verl.utils.tracking.Tracking`` logs every step to W&B (W&B's settings from the environment);
- the step count: ``trainer.total_training_steps``, else ``len(train_dataloader) x total_epochs``
  (rows of ``data.train_files`` capped by ``data.train_max_samples`` (the first rows: the kit sets
  ``data.shuffle=false``), then, with ``data.filter_overlong_prompts=true``, without the prompts whose
  chat-templated token count exceeds ``data.max_prompt_length``, as verl's ``RLHFDataset`` does, over
  ``train_batch_size``, last partial batch dropped), printed as ``Total training steps: N``; when the
  data runs out before that step, the loop ends without its last step (no final save) and exits 0, as verl's does;
- the kit's checkpoint-on-demand hook (``grpokit.runtime.processes.verl_hooks``): at the start of a step,
  when the driver's save request exists, save the last completed step and stop (exit 1, as verl
  does when the hook raises);
- SIGTERM: default action (dies), as verl's main process does.

Knobs (environment): ``FAKE_TRAINER_STEP_S`` (seconds per step, default 0.5),
``FAKE_TRAINER_CRASH_IN_SAVE`` (step whose save dies after the model shards, before data.pt and
the tracker), ``FAKE_TRAINER_FAIL_AT`` (step at which to exit 3), ``FAKE_TRAINER_HANG_AFTER`` (step
after which to hang: alive, no new step, in ``hang_forever``), ``FAKE_TRAINER_RAY_REPORT`` (file
to write the Ray cluster's nodes and resources to, as seen through ``RAY_ADDRESS``),
``FAKE_TRAINER_NAN_GRAD_AT`` (step whose ``actor/grad_norm`` is NaN, written as verl's file logger
writes it: ``null``), ``FAKE_TRAINER_PROFILE`` = ``fail-once`` (exit 3 at step 3 of the point's
first run) or ``slow-once``
(6 s a step in the point's first run), for tests of resubmission, or ``crash-always`` (a
``RuntimeError`` traceback at step 2 of every run), or ``settings-error`` (verl's logger set-up
failing on a package the node's environment lacks: a ``ModuleNotFoundError`` traceback before the
first step of every run), ``FAKE_TRAINER_NODE_WORKERS=1``
(one Ray actor per node of the job's Ray cluster, as verl's FSDP workers: each takes part in every
step and writes its node's rank shards at a save, so a node whose Ray died fails the step or the
save as under verl; what each did goes to ``node_workers.jsonl`` beside ``$VERL_FILE_LOGGER_PATH``),
``FAKE_TRAINER_REAL_WEIGHTS=1`` (each save holds the model's real weights as verl's world-size-1 FSDP
shard, so ``grpokit merge`` runs verl's real model merger on it).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import orjson
import yaml


def write_pt(path: Path, obj: dict) -> None:
    """Write ``obj`` (tensor-free) as ``torch.save`` does, without importing torch (seconds per run):
    a stored zip of ``<stem>/data.pkl`` (pickle protocol 2), ``<stem>/byteorder``, ``<stem>/version``
    (torch's ``serialization.py``, format version 3). ``torch.load`` reads it back."""
    import pickle
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{path.stem}/data.pkl", pickle.dumps(obj, protocol=2))
        zf.writestr(f"{path.stem}/byteorder", "little")
        zf.writestr(f"{path.stem}/version", "3\n")


def unquote(value: str) -> str:
    """A value as verl's Hydra reads it: a quoted string (``'000'``, ``"a b"``) without its quotes and
    their escapes (Hydra's override grammar escapes a backslash only before a quote); any other
    value as written."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        quote, inner = value[0], value[1:-1]
        return inner.replace("\\" + quote, quote)
    return value


def parse(argv: list[str]) -> dict[str, str]:
    out = {}
    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        out[key] = unquote(value)
    return out


def split_config_args(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """``(--config-path, --config-name, the overrides)`` of the trainer's arguments (Hydra's flags,
    ``--flag value`` or ``--flag=value``)."""
    found: dict[str, str] = {}
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        flag, eq, value = arg.partition("=")
        if flag in ("--config-path", "--config-name"):
            found[flag] = value if eq else next(args, "")
        else:
            rest.append(arg)
    return found.get("--config-path"), found.get("--config-name"), rest


def _override_text(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_override_text(v) for v in value) + "]"
    return str(value)


def config_defaults(config_path: str | None, config_name: str | None) -> dict[str, str]:
    """``{dotted.key: value as an override would write it}`` of every leaf of the config ``config_name``
    in ``config_path`` (absolute; None: verl's own folder), composed with Hydra, verl's folder on the
    search path, interpolations resolved where they resolve; {} without a config name."""
    if not config_name:
        return {}
    import importlib.util

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    spec = importlib.util.find_spec("verl")
    verl_dir = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_path or verl_dir), version_base=None):
        cfg = compose(config_name.removesuffix(".yaml"), overrides=[f"hydra.searchpath=[file://{verl_dir}]"])
    out: dict[str, str] = {}

    def walk(node, prefix: str) -> None:
        for key in node:
            try:
                value = node[key]
            except Exception:  # noqa: BLE001 - an interpolation that needs verl's resolvers: left out
                continue
            if OmegaConf.is_dict(value):
                walk(value, f"{prefix}{key}.")
            else:
                plain = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
                out[f"{prefix}{key}"] = _override_text(plain)

    walk(cfg, "")
    return out


def num(cfg: dict[str, str], key: str, default: float) -> float:
    value = cfg.get(key)
    return default if value in (None, "", "null") else float(value)


def listed(value: str | None) -> list[str]:
    """A list override as Hydra writes it (``[a,b]``, ``['a', 'b']``) or one value, as strings."""
    text = (value or "").strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [part.strip().strip("'\"") for part in text.split(",") if part.strip()]


def logger_list(cfg: dict[str, str]) -> list[str]:
    """``trainer.logger`` (a string or a list, as verl's Tracking takes); verl's default when unset."""
    return listed(cfg["trainer.logger"]) if "trainer.logger" in cfg else ["console", "wandb"]


def train_steps_in_data(cfg: dict[str, str]) -> int | None:
    """``len(train_dataloader) x total_epochs`` as verl computes it; None when the files are not there."""
    import pyarrow.parquet as pq

    files = [Path(f) for f in listed(cfg.get("data.train_files"))]
    if not files or not all(f.is_file() for f in files):
        return None
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    cap = int(num(cfg, "data.train_max_samples", -1))
    if cap > 0:
        rows = min(rows, cap)
    batch, epochs = int(num(cfg, "data.train_batch_size", 1024)), int(num(cfg, "trainer.total_epochs", 30))
    if cfg.get("data.filter_overlong_prompts", "false").lower() == "true":  # verl 0.9.1's default: False
        # only the rows the run can reach are tokenized (cheap): the step count is min(total, data steps)
        steps = num(cfg, "trainer.total_training_steps", 0)
        enough = math.ceil(steps / epochs) * batch if steps > 0 and epochs > 0 else None
        rows = rows_within_prompt_length(cfg, files, rows, enough)
    return rows // batch * epochs  # drop_last=True


def rows_within_prompt_length(cfg: dict[str, str], files: list[Path], rows: int, enough: int | None) -> int:
    """How many of the first ``rows`` rows verl's ``RLHFDataset.maybe_filter_out_long_prompts`` keeps:
    ``len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True))`` <=
    ``data.max_prompt_length`` (verl's default 512), with the tokenizer of ``actor_rollout_ref.model.path``
    (verl's ``hf_tokenizer``; a text model has no processor). Counting stops at ``enough`` kept rows.
    The count is cached in this user's own temp folder (``grpokit-prompt-filter-<uid>``, 0700) by its
    inputs (files and tokenizer by mtime): importing transformers takes seconds, and every trainer
    start of a test suite asks the same question."""
    import hashlib
    import tempfile

    model = Path(cfg["actor_rollout_ref.model.path"])
    limit = int(num(cfg, "data.max_prompt_length", 512))
    key = cfg.get("data.prompt_key", "prompt")
    stamp = [str(f.resolve()) + f":{f.stat().st_mtime_ns}" for f in files]
    stamp += [f"{f}:{f.stat().st_mtime_ns}" for f in sorted(model.glob("*token*")) + sorted(model.glob("*.jinja"))]
    digest = hashlib.sha256(json.dumps([stamp, str(model.resolve()), limit, key, rows, enough]).encode()).hexdigest()
    folder = _private_cache(Path(tempfile.gettempdir()) / f"grpokit-prompt-filter-{os.getuid()}")
    cache = folder / f"{digest[:32]}.json" if folder is not None else None
    if cache is not None and cache.is_file():
        return int(json.loads(cache.read_text())["kept"])
    kept = _count_kept(model, files, limit, key, rows, enough)
    if cache is not None:
        part = cache.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps({"kept": kept}))
        os.replace(part, cache)
    return kept


def _private_cache(folder: Path) -> Path | None:
    """``folder``, created mode 0700, when it is a folder of this uid's (not a symlink); None
    otherwise (another user's folder of that name: the count is not cached, nor read from it).
    One per user: a folder shared in ``/tmp`` is refused to the second user on the node, and what
    one user writes there must not decide another user's run."""
    import stat

    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return None
    return folder if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() else None


def _count_kept(model: Path, files: list[Path], limit: int, key: str, rows: int, enough: int | None) -> int:
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    kept = seen = 0
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=64, columns=[key]):
            for prompt in batch.column(0).to_pylist():
                if seen == rows or (enough is not None and kept >= enough):
                    return kept
                seen += 1
                ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
                ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # transformers 5: a BatchEncoding
                kept += len(ids) <= limit
    return kept


class NodeWorkers:
    """One Ray actor per alive node of the job's Ray cluster (``FAKE_TRAINER_NODE_WORKERS=1``),
    pinned there with node affinity; rank shards are split between them in node order."""

    def __init__(self, world: int, log_path: Path):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR")
        self.ray = ray

        @ray.remote(num_cpus=0)
        class Worker:
            def where(self) -> dict:
                return {"node": os.environ.get("SLURMD_NODENAME") or os.uname().nodename, "pid": os.getpid()}

            def step(self, step: int) -> int:
                return step

            def save(self, actor_dir: str, world: int, ranks: list[int]) -> dict:
                for rank in ranks:
                    for kind in ("model", "optim", "extra_state"):
                        shard = Path(actor_dir) / f"{kind}_world_size_{world}_rank_{rank}.pt"
                        write_pt(shard, {"double": kind, "rank": rank, "pad": "x" * 256})
                return {**self.where(), "ranks": ranks, "time": time.time()}

        nodes = [n for n in ray.nodes() if n["Alive"]]
        self.workers = [
            Worker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in nodes
        ]
        per_node = math.ceil(world / len(self.workers))
        self.ranks = [list(range(world))[i * per_node : (i + 1) * per_node] for i in range(len(self.workers))]
        self.log_path = log_path
        self._log({"event": "started", "workers": ray.get([w.where.remote() for w in self.workers])})

    def _log(self, record: dict) -> None:
        with open(self.log_path, "a") as f:
            f.write(json.dumps({**record, "time": time.time()}) + "\n")

    def step(self, step: int) -> None:
        self.ray.get([w.step.remote(step) for w in self.workers], timeout=60)

    def save_shards(self, actor_dir: Path, step: int, world: int) -> None:
        calls = [w.save.remote(str(actor_dir), world, r) for w, r in zip(self.workers, self.ranks, strict=True)]
        self._log({"event": "save", "step": step, "by": self.ray.get(calls, timeout=60)})


NODE_WORKERS: NodeWorkers | None = None
#: The file each save writes into ``actor/`` beside verl's: ``{"rehearsal": true, "real_weights": bool}``
#: (``grpokit merge`` refuses a rehearsal checkpoint without weights, naming why).
REHEARSAL_MARK = "rehearsal.json"
#: ``FAKE_TRAINER_REAL_WEIGHTS=1``: the model folder (``actor_rollout_ref.model.path``) whose weights
#: each save writes as verl's FSDP shard, so verl's model merger merges a real checkpoint.
REAL_WEIGHTS_FROM: Path | None = None


def real_weights(actor: Path, model_dir: Path, world: int) -> None:
    """verl's world-size-1 FSDP save of the (untrained) model: ``model_world_size_1_rank_0.pt`` is its
    full state dict (``torch.save``), ``huggingface/`` its config and tokenizer files, as verl copies them."""
    import shutil

    import torch
    from safetensors.torch import load_file

    if world != 1:
        raise SystemExit(f"FAKE_TRAINER_REAL_WEIGHTS needs one GPU's world (got {world})")
    state = {}
    for shard in sorted(model_dir.glob("*.safetensors")):
        state.update(load_file(shard))
    for f in model_dir.iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copy(f, actor / "huggingface" / f.name)
    torch.save(state, actor / "model_world_size_1_rank_0.pt")
    for kind in ("optim", "extra_state"):
        torch.save({}, actor / f"{kind}_world_size_1_rank_0.pt")


def save(ckpt: Path, step: int, world: int, crash_in_save: int | None) -> None:
    step_dir = ckpt / f"global_step_{step}"
    actor = step_dir / "actor"
    (actor / "huggingface").mkdir(parents=True, exist_ok=True)
    if NODE_WORKERS is not None:
        NODE_WORKERS.save_shards(actor, step, world)
    else:
        for rank in range(world):
            for kind in ("model", "optim", "extra_state"):
                write_pt(actor / f"{kind}_world_size_{world}_rank_{rank}.pt", {"double": kind, "rank": rank})
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    (actor / "huggingface" / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    if REAL_WEIGHTS_FROM is not None:
        real_weights(actor, REAL_WEIGHTS_FROM, world)
    # not verl's: says that a stand-in wrote this checkpoint, and whether its shards hold weights
    (actor / REHEARSAL_MARK).write_text(json.dumps({"rehearsal": True, "real_weights": REAL_WEIGHTS_FROM is not None}))
    if crash_in_save == step:
        os._exit(9)  # killed mid-save: shards written, data.pt and tracker not
    write_pt(step_dir / "data.pt", {"step": step})  # verl: the dataloader's state_dict
    with open(ckpt / "latest_checkpointed_iteration.txt", "w") as f:
        f.write(str(step))


def metrics(step: int, cfg: dict[str, str], step_s: float, test: bool) -> dict[str, float]:
    # a key the point leaves at verl's default is not on the command line: verl 0.9.1's defaults
    batch, n = num(cfg, "data.train_batch_size", 1024), num(cfg, "actor_rollout_ref.rollout.n", 1)
    resp = num(cfg, "data.max_response_length", 512)
    # A made-up learning curve that differs per point (more samples per prompt learn faster),
    # so that report plots and tables of a sweep show distinct points.
    reward = round(min(1.0, 0.3 + 0.004 * step * math.log2(2 * n) + 0.0005 * batch), 4)
    out = {
        "training/global_step": step,
        "critic/score/mean": reward,
        "critic/rewards/mean": reward,
        "response_length/mean": round(resp * (0.5 - 0.002 * step), 3),
        "response_length/clip_ratio": round(max(0.0, 0.2 - 0.004 * step), 4),
        "actor/kl_loss": round(0.0004 * step, 6),
        "actor/pg_loss": round(-0.01 * math.sin(step), 6),
        "actor/grad_norm": round(0.5 + 0.01 * step, 4),
        "actor/entropy": round(max(0.05, 1.2 - 0.01 * step), 4),
        "timing_s/gen": round(step_s * 0.2, 4),
        "timing_s/old_log_prob": round(step_s * 0.05, 4),
        "timing_s/ref": round(step_s * 0.05, 4),
        "timing_s/update_actor": round(step_s * 0.7, 4),
        "timing_s/step": round(step_s, 4),
        "perf/total_num_tokens": batch * n * resp * 0.6,
        "perf/throughput": round(batch * n * resp * 0.6 / step_s, 2),
    }
    if test:
        out["val-core/openai/gsm8k/acc/mean@1"] = round(min(1.0, 0.5 + 0.001 * step * math.log2(2 * n)), 4)
    return out


def call_reward(cfg: dict[str, str]) -> dict[str, float]:
    """Call the experiment's custom reward once, with its reward_kwargs, as verl's reward loop would."""
    path, name = cfg.get("reward.custom_reward_function.path"), cfg.get("reward.custom_reward_function.name")
    if not path or path == "null":
        return {}
    import importlib.util

    import pandas as pd

    # typed as verl gets them from Hydra's override grammar (512 -> int, 0.5 -> float, text stays text)
    kwargs = {
        k.rsplit(".", 1)[-1]: yaml.safe_load(v)
        for k, v in cfg.items()
        if k.startswith("reward.custom_reward_function.reward_kwargs.")
    }
    spec = importlib.util.spec_from_file_location("custom_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name or "compute_score")
    row = pd.read_parquet(cfg["data.val_files"]).iloc[0]
    ground_truth = row["reward_model"]["ground_truth"]
    extra_info = dict(row["extra_info"])
    if "questions_and_answers" in ground_truth:  # Memory-RL: a memory holding every target mapping
        qas = ground_truth["questions_and_answers"]
        memory = {
            "core": "",
            "semantic": [
                {f"m{i}": f"{qa['question'].splitlines()[0]} -> Label: {qa['answer']}"} for i, qa in enumerate(qas)
            ],
            "episodic": [],
        }
        solution = json.dumps(memory)
    elif isinstance(ground_truth, Mapping):  # tool calling: the agent loop's tool rewards for search -> read
        solution = f"FINAL: {ground_truth['target_answer']}"
        extra_info["tool_rewards"] = [0.25, 0.75]
    else:  # a plain answer (GSM8K's; the length task): the answer as the response
        solution = f"#### {ground_truth}"
    result = fn(row["data_source"], solution, ground_truth, extra_info, **kwargs)
    if inspect.isawaitable(result):
        result = asyncio.run(result)
    return {f"reward/{k}": float(v) for k, v in result.items()}


class ScalarEventWriter:
    """TensorBoard scalars as verl's ``tensorboard`` logger writes them, without torch.

    verl logs through ``torch.utils.tensorboard.SummaryWriter.add_scalar``, which hands
    tensorboard's ``EventFileWriter`` one ``Event(step, wall_time, Summary(value=[Value(tag,
    simple_value)]))`` per scalar (``torch/utils/tensorboard/summary.py::scalar``, ``new_style``
    off); this writes the same events through the same writer (file
    ``events.out.tfevents.<time>.<host>.<pid>.<n>`` in ``logdir``). Importing torch's writer costs
    about 2 s of CPU at every trainer start; tensorboard's own, 0.4 s.
    """

    def __init__(self, logdir: str) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer = EventFileWriter(logdir)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
        self._writer.add_event(event_pb2.Event(summary=summary, step=step, wall_time=time.time()))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def hang_forever(step: int) -> None:
    """Alive, no new step, no exit (verl#4709: a collective that never returns)."""
    print(f"hanging after step {step} (FAKE_TRAINER_HANG_AFTER)", file=sys.stderr, flush=True)
    while True:
        time.sleep(3600)


def main() -> int:
    config_path, config_name, overrides = split_config_args(sys.argv[1:])
    cfg = {**config_defaults(config_path, config_name), **parse(overrides)}
    step_s = float(os.environ.get("FAKE_TRAINER_STEP_S", "0.5"))
    crash = int(os.environ["FAKE_TRAINER_CRASH_IN_SAVE"]) if os.environ.get("FAKE_TRAINER_CRASH_IN_SAVE") else None
    fail_at = int(os.environ["FAKE_TRAINER_FAIL_AT"]) if os.environ.get("FAKE_TRAINER_FAIL_AT") else None
    hang_after = int(os.environ["FAKE_TRAINER_HANG_AFTER"]) if os.environ.get("FAKE_TRAINER_HANG_AFTER") else None
    nan_grad_at = int(os.environ["FAKE_TRAINER_NAN_GRAD_AT"]) if os.environ.get("FAKE_TRAINER_NAN_GRAD_AT") else None
    profile = os.environ.get("FAKE_TRAINER_PROFILE", "")
    if profile and os.environ.get("GRPOKIT_RUN_DIR"):
        marker = Path(os.environ["GRPOKIT_RUN_DIR"]) / ".fake_trainer_first_run_done"
        if not marker.exists():
            marker.touch()
            if profile == "fail-once":
                fail_at = 3
            elif profile == "slow-once":
                step_s = 6.0
    if profile == "settings-error":  # as verl's Tracking does on `import swanlab` where it is not installed
        raise ModuleNotFoundError("No module named 'swanlab' (FAKE_TRAINER_PROFILE)")
    # a crash that follows the point on every node, as a bug would (a CUDA error, raised at step 2)
    crash_at = 2 if profile == "crash-always" else None
    data_steps = train_steps_in_data(cfg)
    total = int(num(cfg, "trainer.total_training_steps", data_steps if data_steps is not None else 4))
    print(f"Total training steps: {total}", flush=True)
    loggers = logger_list(cfg)
    save_freq = int(num(cfg, "trainer.save_freq", -1))
    test_freq = int(num(cfg, "trainer.test_freq", -1))
    world = int(num(cfg, "trainer.n_gpus_per_node", 1) * num(cfg, "trainer.nnodes", 1))
    ckpt = Path(cfg["trainer.default_local_dir"])
    ctl = Path(os.environ["GRPOKIT_CONTROL_DIR"]) if os.environ.get("GRPOKIT_CONTROL_DIR") else None

    if os.environ.get("FAKE_TRAINER_RAY_REPORT"):
        import ray

        ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR")
        nodes = [{"alive": n["Alive"], "resources": n["Resources"]} for n in ray.nodes()]
        Path(os.environ["FAKE_TRAINER_RAY_REPORT"]).write_text(
            json.dumps({"nodes": nodes, "cluster_resources": ray.cluster_resources()})
        )
        ray.shutdown()
    if os.environ.get("FAKE_TRAINER_REAL_WEIGHTS") == "1":
        global REAL_WEIGHTS_FROM
        REAL_WEIGHTS_FROM = Path(cfg["actor_rollout_ref.model.path"])
    if os.environ.get("FAKE_TRAINER_NODE_WORKERS") == "1":
        global NODE_WORKERS
        attempt_dir = Path(os.environ.get("VERL_FILE_LOGGER_PATH", "metrics.jsonl")).parent
        attempt_dir.mkdir(parents=True, exist_ok=True)
        NODE_WORKERS = NodeWorkers(world, attempt_dir / "node_workers.jsonl")

    start = 1
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    if cfg.get("trainer.resume_mode", "auto") == "auto" and tracker.exists():
        last = int(tracker.read_text().strip())
        if not (ckpt / f"global_step_{last}" / "data.pt").exists():
            print(f"tracker names step {last} but global_step_{last} is incomplete", file=sys.stderr)
            return 2
        start = last + 1
        print(f"Resuming from {ckpt / f'global_step_{last}'}, setting global step to {last}", flush=True)

    log_path = Path(os.environ.get("VERL_FILE_LOGGER_PATH", "metrics.jsonl"))
    if "file" in loggers:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    else:
        log_path = Path(os.devnull)
    writer = None
    if os.environ.get("TENSORBOARD_DIR") and "tensorboard" in loggers:
        writer = ScalarEventWriter(os.environ["TENSORBOARD_DIR"])
    tracking = None
    if "wandb" in loggers:
        # verl's REAL tracker (verl/utils/tracking.py, imports on CPU): wandb.init exactly as verl
        # calls it (no run id), W&B's other settings from the environment the kit gives the trainer
        from verl.utils.tracking import Tracking

        trainer_cfg = {k.split(".", 1)[1]: v for k, v in cfg.items() if k.startswith("trainer.")}
        tracking = Tracking(
            project_name=cfg.get("trainer.project_name", "verl_examples"),
            experiment_name=cfg.get("trainer.experiment_name", "gsm8k"),
            default_backend=["wandb"],
            config={"trainer": trainer_cfg},
        )
    extra = call_reward(cfg)
    saved = {start - 1}
    with open(log_path, "wb", buffering=0) as fp:
        # verl's epoch loop runs out of batches at data_steps, before the last step when that is larger
        for step in range(start, min(total, data_steps if data_steps is not None else total) + 1):
            if ctl is not None and (ctl / "save_request").exists():
                last_done = step - 1
                if last_done > 0 and last_done not in saved:
                    save(ckpt, last_done, world, crash)
                (ctl / "saved_for_requeue.json").write_text(
                    json.dumps({"step": last_done, "checkpoint_dir": str(ckpt)})
                )
                print(f"checkpointed step {last_done} on request; stopping", file=sys.stderr, flush=True)
                return 1
            if crash_at == step:
                raise RuntimeError("CUDA error: an illegal memory access was encountered (FAKE_TRAINER_PROFILE)")
            if fail_at == step:
                print(f"failing at step {step} (FAKE_TRAINER_FAIL_AT)", file=sys.stderr, flush=True)
                return 3
            time.sleep(step_s)
            if NODE_WORKERS is not None:
                NODE_WORKERS.step(step)
            last = step == total
            if save_freq > 0 and (step % save_freq == 0 or last):
                save(ckpt, step, world, crash)
                saved.add(step)
            data = metrics(step, cfg, step_s, test_freq > 0 and (step % test_freq == 0 or last))
            data.update(extra)
            if nan_grad_at == step:
                data["actor/grad_norm"] = float("nan")
            # verl's FileLogger: orjson, which writes NaN and inf as null
            fp.write(orjson.dumps({"step": step, "data": data}, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            if tracking is not None:
                tracking.log(data=data, step=step)
            if writer is not None:
                for key, value in data.items():
                    writer.add_scalar(key, value, step)
                writer.flush()
            if "console" in loggers:
                print(f"step:{step} - " + " - ".join(f"{k}:{v}" for k, v in data.items()), flush=True)
            if hang_after == step:
                hang_forever(step)
    if writer is not None:
        writer.close()
    if tracking is not None:
        tracking.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
