"""What a point needs of the job's environment (:mod:`grpokit.validate.job_environment`), refused
before submission when that environment lacks it; one :class:`~grpokit.problems.Problem` each.

====================================  ==========================================================
the point's setting                    needs in the job's Python (or of the caller's environment)
====================================  ==========================================================
``trainer.logger`` backends            each a backend verl's ``Tracking.supported_backend`` names
                                       (read from the installed verl's ``verl/utils/tracking.py``),
                                       and the package verl imports for it (:data:`LOGGER_PACKAGES`)
``wandb`` among them, online           a W&B key: ``WANDB_API_KEY`` or a ``~/.netrc`` entry for
                                       W&B's host, else ``wandb.init`` raises ``UsageError`` on the node
``mlflow`` among them                  ``MLFLOW_TRACKING_URI`` (verl's default is a SQLite file in
                                       the node's own ``/tmp``, lost with the node)
``trainer.device=npu``, an NPU         ``torch_npu`` (verl imports it on such paths; CUDA nodes lack it)
profiler (any ``*.profiler.tool``)
``actor_rollout_ref.rollout.name``     its engine's package (:data:`ENGINE_PACKAGES`), in an
                                       environment that trains (one with any rollout engine)
``actor.strategy=megatron``            ``megatron-core``, and the bridge verl builds the model with
(``ppo_megatron_trainer``,             (``megatron.vanilla_mbridge``: ``mbridge``, else
``model_engine=megatron``)             ``megatron-bridge``; :data:`MEGATRON_BRIDGES`), in any
                                       environment (the script's own package, as a logger's is)
``attn_implementation=flash_*``        ``flash-attn``, in an environment that trains
====================================  ==========================================================

An environment with no rollout engine at all cannot train (the kit's CPU login and test
environments): its engine checks are left out (not Megatron's: a Megatron script needs its packages
wherever it runs), the job then ends ``skipped_no_gpu`` on a node without a GPU. The rehearsal
trainer (``rehearse=true``) needs no engine either; its loggers are
verl's real ones and are checked. An interpreter that could not be asked (a container's path
that exists on the GPU nodes only) gives no refusal: the dry run says so (:func:`notices`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import netrc
import os
from pathlib import Path
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf

from grpokit.config.overrides import flat_base
from grpokit.config.point import PointSpec, logger_backends
from grpokit.problems import Problem, note
from grpokit.validate.job_environment import JobEnvironment

#: verl's ``trainer.logger`` backends -> the distribution ``verl/utils/tracking.py`` imports for it.
LOGGER_PACKAGES = {
    "wandb": "wandb",
    "mlflow": "mlflow",
    "swanlab": "swanlab",
    "vemlp_wandb": "volcengine-ml-platform",
    "tensorboard": "tensorboard",
    "clearml": "clearml",
    "trackio": "trackio",
}
#: ``actor_rollout_ref.rollout.name`` -> the distribution of its engine.
ENGINE_PACKAGES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
MEGATRON_PACKAGE = "megatron-core"
#: ``actor.megatron.vanilla_mbridge`` -> the package verl 0.9.1 builds the Megatron model with
#: (``verl/workers/engine/megatron/transformer_impl.py::MegatronEngine._build_tf_config``: ``mbridge``'s
#: ``AutoBridge`` when true, Megatron-Bridge's ``megatron.bridge.AutoBridge`` otherwise).
MEGATRON_BRIDGES = {True: "mbridge", False: "megatron-bridge"}
FLASH_ATTN_PACKAGE = "flash-attn"
NPU_PACKAGE = "torch-npu"
#: W&B's own offline switches: runtime.wandb_mode, or WANDB_MODE in the caller's environment.
_WANDB_QUIET = ("offline", "disabled", "dryrun")


@functools.cache
def verl_logger_backends(folder: str | None = None) -> tuple[str, ...]:
    """``Tracking.supported_backend`` of the verl in ``folder`` (the job's, a fork's), else of the
    installed verl, read from its source (no import).

    Returns () when the file or the list is not found (then no backend name is refused).
    """
    if folder is None:
        spec = importlib.util.find_spec("verl")
        if spec is None or not spec.submodule_search_locations:
            return ()
        folder = next(iter(spec.submodule_search_locations))
    source = Path(folder) / "utils" / "tracking.py"
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError):
        return ()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "supported_backend" for t in node.targets):
            try:
                return tuple(ast.literal_eval(node.value))
            except ValueError:
                return ()
    return ()


def _loggers(cfg: DictConfig) -> list[str]:
    return logger_backends(OmegaConf.select(cfg, "trainer.logger"))


def _who(env: JobEnvironment) -> str:
    return f"the job's Python ({env.python})"


def check(
    spec: PointSpec, cfg: DictConfig, env: JobEnvironment, environ: dict[str, str] | None = None
) -> list[Problem]:
    """The point's needs against ``env`` and the caller's environment ``environ`` (default ``os.environ``)."""
    environ = dict(os.environ) if environ is None else environ
    problems = _logger_problems(spec, cfg, env, environ)
    problems += _device_problems(spec, cfg, env)
    rehearsal = bool(getattr(spec.runtime, "rehearsal", False))
    if env.error is None and not rehearsal and _trains(env):
        problems += _engine_problems(spec, cfg, env)
    megatron = str(OmegaConf.select(cfg, "actor_rollout_ref.actor.strategy", default="")) == "megatron"
    if env.error is None and not rehearsal and megatron:
        problems += _megatron_problems(spec, cfg, env)
    return problems


def _trains(env: JobEnvironment) -> bool:
    return any(env.version_of(p) for p in ENGINE_PACKAGES.values())


def _logger_problems(spec: PointSpec, cfg: DictConfig, env: JobEnvironment, environ: dict[str, str]) -> list[Problem]:
    problems = []
    key = "verl.trainer.logger"
    supported = verl_logger_backends(env.verl_folder if env.error is None else None)
    for backend in _loggers(cfg):
        if supported and backend not in supported and backend != "tracking":
            problems.append(
                Problem(
                    spec.name,
                    key,
                    f"{backend!r} is not a logger backend verl supports "
                    f"(verl/utils/tracking.py: {', '.join(supported)})",
                    f"use one of those in verl.trainer.logger (got {backend!r})",
                )
            )
            continue
        package = LOGGER_PACKAGES.get(backend)
        if package and env.error is None and not env.version_of(package):
            problems.append(
                Problem(
                    spec.name,
                    key,
                    f"logger {backend} needs the package {package}, which {_who(env)} does not have",
                    f"pip install {package} in the job's environment, or drop {backend} from verl.trainer.logger",
                )
            )
    loggers = _loggers(cfg)
    mode = getattr(spec.runtime, "wandb_mode", None) or environ.get("WANDB_MODE")
    if "wandb" in loggers and (mode or "online") not in _WANDB_QUIET and not wandb_key_found(environ):
        problems.append(
            Problem(
                spec.name,
                "runtime.wandb_mode",
                "verl.trainer.logger has wandb, online, but no W&B key is set here (WANDB_API_KEY, or ~/.netrc "
                "from `wandb login`): wandb.init would raise UsageError on the node",
                "export WANDB_API_KEY=... (or run `wandb login`) before the sweep, or runtime.wandb_mode=offline "
                "(then wandb sync <run>/wandb/offline-run-*)",
            )
        )
    if "mlflow" in loggers and not environ.get("MLFLOW_TRACKING_URI"):
        problems.append(
            Problem(
                spec.name,
                key,
                "logger mlflow with no MLFLOW_TRACKING_URI: verl would write to sqlite:////tmp/mlruns.db on the "
                "node, lost with it",
                "export MLFLOW_TRACKING_URI=<your tracking server, or sqlite:///<a shared folder>/mlruns.db>",
            )
        )
    return problems


def check_verl(env: JobEnvironment, experiment: str = "verl_script") -> list[Problem]:
    """The job's verl must be a release the kit is tested with (:mod:`grpokit.validate.verl_release`;
    the packaged experiments need a narrower range than a ``verl_script=`` run).

    The job's verl is the job's Python's (asked, :mod:`grpokit.validate.job_environment`), else,
    when it could not be asked, this command's. Another verl than this command's is not refused:
    the points are validated against it (:mod:`grpokit.validate.job_verl`). One problem, or [].
    """
    from grpokit.validate import verl_release
    from grpokit.validate.job_verl import target

    if env.error is None and env.version_of("verl") is None:
        return verl_release.check(None, _who(env), packaged=False)
    verl = target(env)
    who = _who(env) if env.error is None else "this command's Python (the job's could not be asked)"
    where = f"at {verl.folder}, {who}" if verl.folder else who
    packaged = experiment != "verl_script"
    found = verl_release.check(verl.version, where, packaged=packaged, experiment=experiment)
    if not found and not packaged and not verl_release.within(verl.version or "", verl_release.EXPERIMENTS):
        note(
            f"verl {verl.version} has no v1 trainer (verl.trainer.ppo.v1, from 0.9.0): the kit's save before a "
            "preemption or the time limit does not run; a requeued job resumes from its last "
            "verl.trainer.save_freq checkpoint"
        )
    return found


def wandb_key_found(environ: dict[str, str]) -> bool:
    """Whether W&B finds a key: ``WANDB_API_KEY``, or a netrc entry (``$NETRC`` or ``~/.netrc``) for
    the host of ``WANDB_BASE_URL`` (default ``api.wandb.ai``), as ``wandb/sdk/lib/apikey.py`` looks."""
    if environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = environ.get("NETRC") or os.path.join(environ.get("HOME") or str(Path.home()), ".netrc")
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def _device_problems(spec: PointSpec, cfg: DictConfig, env: JobEnvironment) -> list[Problem]:
    typed = {o.lstrip("+~").split("=", 1)[0].removeprefix("verl.") for o in spec.kit_overrides}
    keys = ["trainer.device", *(k for k in flat_base() if k.endswith("profiler.tool"))]
    keys.sort(key=lambda k: k not in typed)  # the key the user typed first, not one that follows it
    wants = [(k, "npu") for k in keys if str(OmegaConf.select(cfg, k, default="")) == "npu"]
    if not wants or env.error is not None or env.version_of(NPU_PACKAGE):
        return []
    key, value = wants[0]
    return [
        Problem(
            spec.name,
            f"verl.{key}",
            f"{key}={value} is for Ascend NPUs: verl imports torch_npu there, which {_who(env)} does not have",
            f"drop verl.{key}={value} on CUDA nodes (verl's default: trainer.device=cuda, no NPU profiler)",
        )
    ]


def _megatron_problems(spec: PointSpec, cfg: DictConfig, env: JobEnvironment) -> list[Problem]:
    """``strategy: megatron`` (verl's ``ppo_megatron_trainer``): ``megatron-core`` and the model bridge
    (:data:`MEGATRON_BRIDGES`) in the job's Python; the first one missing, named."""
    vanilla = bool(OmegaConf.select(cfg, "actor_rollout_ref.actor.megatron.vanilla_mbridge", default=False))
    for package, key in (
        (MEGATRON_PACKAGE, "verl.actor_rollout_ref.actor.strategy"),
        (MEGATRON_BRIDGES[vanilla], "verl.actor_rollout_ref.actor.megatron.vanilla_mbridge"),
    ):
        if not env.version_of(package):
            return [
                Problem(
                    spec.name,
                    key,
                    f"strategy megatron needs {package}, which {_who(env)} does not have",
                    f"pip install 'grpokit[megatron]' (or {package}) in the job's environment, or use an FSDP "
                    "config (ppo_trainer)",
                )
            ]
    return []


def _engine_problems(spec: PointSpec, cfg: DictConfig, env: JobEnvironment) -> list[Problem]:
    problems = []
    have = [name for name, package in ENGINE_PACKAGES.items() if env.version_of(package)]
    name = str(OmegaConf.select(cfg, "actor_rollout_ref.rollout.name", default=""))
    package = ENGINE_PACKAGES.get(name)
    if package and not env.version_of(package):
        problems.append(
            Problem(
                spec.name,
                "verl.actor_rollout_ref.rollout.name",
                f"rollout engine {name} needs {package}, which {_who(env)} does not have (it has {', '.join(have)})",
                f"verl.actor_rollout_ref.rollout.name={have[0]}, or install {package} in the job's environment",
            )
        )
    attn = str(OmegaConf.select(cfg, "actor_rollout_ref.model.override_config.attn_implementation", default=""))
    if attn.startswith("flash_attention") and not env.version_of(FLASH_ATTN_PACKAGE):
        problems.append(
            Problem(
                spec.name,
                "verl.actor_rollout_ref.model.override_config.attn_implementation",
                f"{attn} needs {FLASH_ATTN_PACKAGE}, which {_who(env)} does not have",
                "attn_implementation=sdpa (and actor_rollout_ref.model.use_remove_padding=false), "
                f"or install {FLASH_ATTN_PACKAGE} in the job's environment",
            )
        )
    return problems
