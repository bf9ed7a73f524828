"""Tasks as plugins (grpokit.config.task_registry): each task registers what it brings (its sidecar
kinds, its data builder, its reward); the generic layers read the registry and name no task; each
sidecar setting has one default (its kind's dataclass), which no experiment file restates."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpokit.cli import prepare_data
from grpokit.config.schema import SidecarConf, VllmSettings, sidecar_kind_settings, sidecar_settings
from grpokit.config.task_registry import Task, sidecar_kinds, tasks
from grpokit.paths import CONFIG_DIR, package_file
from grpokit.runtime.processes import sidecars
from grpokit.serving.vllm import VllmServe
from grpokit.tasks.memalpha import prompt
from grpokit.tasks.memalpha import server as memory_server
from grpokit.tasks.memalpha.settings import MemoryServerSidecar, ServerOptions

SRC = Path(__file__).resolve().parents[2] / "src"
REPO = SRC.parent
EXPERIMENT_DIRS = (CONFIG_DIR / "experiment", REPO / "configs" / "experiment")


# ---- the registry -------------------------------------------------------------------------------


def test_each_task_package_registers_what_it_brings():
    found = tasks()
    assert set(found) == {"gsm8k", "length", "memalpha", "tool_memory"}
    assert all(isinstance(t, Task) for t in found.values())
    assert set(sidecar_kinds()) == {"memory_server"}
    assert sidecar_kinds()["memory_server"].settings is MemoryServerSidecar
    for task in found.values():
        if task.data:  # the data builder's interface, as grpokit prepare-data calls it
            module = importlib.import_module(task.data)
            assert callable(module.add_arguments) and callable(module.main), task.data
        if task.reward:  # verl's custom_reward_function: a module file and a function in it
            module_name, _, function = task.reward.partition(":")
            assert callable(getattr(importlib.import_module(module_name), function)), task.reward


def test_the_experiment_files_point_verl_at_the_registered_rewards():
    rewards = {t.reward for t in tasks().values() if t.reward}
    for path in sorted((CONFIG_DIR / "experiment").glob("*.yaml")):
        text = path.read_text()
        match = re.search(r"kit_package_file:(tasks/\w+/\w+)\.py\}\s*\n\s*name: (\w+)", text)
        if match:
            assert f"grpokit.{match[1].replace('/', '.')}:{match[2]}" in rewards, path.name


def test_prepare_data_offers_every_task_with_a_data_builder():
    assert prepare_data.data_builders() == {n: t.data for n, t in tasks().items() if t.data}
    assert set(prepare_data.data_builders()) == {"gsm8k", "memalpha", "tool_memory"}


def _task_module_names() -> set[str]:
    return {f"grpokit.tasks.{name}" for name in tasks()}


def test_the_generic_layers_name_no_task():
    """Outside ``src/grpokit/tasks/``: no import of a task's module, no string naming one (an argv's
    ``-m grpokit.tasks.x.y``, a table of module names), no task's sidecar kind named in code."""
    task_modules = _task_module_names()
    kinds = set(sidecar_kinds())
    found = []
    for path in sorted((SRC / "grpokit").rglob("*.py")):
        if (SRC / "grpokit" / "tasks") in path.parents:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                names = re.findall(r"grpokit\.tasks\.\w+", node.value)
                if node.value in kinds:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: the sidecar kind {node.value!r}")
            found += [
                f"{path.relative_to(SRC)}:{node.lineno}: {n}"
                for n in names
                if any(n == m or n.startswith(m + ".") for m in task_modules)
            ]
    assert found == [], "generic layers naming a task (ask grpokit.config.task_registry):\n" + "\n".join(found)


# ---- one default per setting --------------------------------------------------------------------


def _defaults(cls) -> dict:
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }


def test_the_memory_server_settings_and_command_line_come_from_one_dataclass():
    parser = memory_server.build_arg_parser()
    args = parser.parse_args(["--answer-base-url", "http://h:1/v1", "--answer-model", "m"])
    flags = {f.name for f in dataclasses.fields(memory_server.ServerSettings) if f.metadata.get("flag") is not False}
    defaults = {k: v for k, v in _defaults(memory_server.ServerSettings).items() if k in flags}
    assert {k: getattr(args, k) for k in flags} == {**defaults, "answer_base_url": "http://h:1/v1", "answer_model": "m"}
    assert {k: defaults[k] for k in _defaults(ServerOptions)} == _defaults(ServerOptions)
    with pytest.raises(SystemExit):  # the answer server is required
        parser.parse_args([])
    build = inspect.signature(prompt.build_prompt).parameters
    assert (build["top_k"].default, build["max_prompt_tokens"].default) == (ServerOptions.top_k, 30_000)
    # the sidecar's keys are the server's options (and its answer server), with their defaults
    spec = sidecar_settings("memory", {"kind": "memory_server", "answer": "answer_llm"})
    assert dataclasses.asdict(spec.settings) == {**_defaults(ServerOptions), "answer": "answer_llm"}


def test_vllm_serve_takes_the_vllm_sidecars_defaults():
    serve = VllmServe(model="m", served_model_name="n", host="h", port=1)
    sidecar = SidecarConf.of({"kind": "vllm", "model": "m", "served_model_name": "n"})
    assert serve == VllmServe.from_sidecar(sidecar, host="h", port=1)
    own = {k: v for k, v in _defaults(VllmSettings).items() if k not in ("model", "served_model_name")}
    assert {k: getattr(serve, k) for k in own} == own
    assert serve.gpu_memory_utilization == SidecarConf.gpu_memory_utilization


def test_a_key_of_another_kind_is_refused_naming_both_kinds():
    with pytest.raises(ValueError, match=r"sidecars\.a\.top_k: no such key; it is a key of kind memory_server"):
        sidecar_settings("a", {"kind": "vllm", "top_k": 3})
    with pytest.raises(
        ValueError, match=r"sidecars\.a\.max_num_seq: no such key; did you mean sidecars\.a\.max_num_seqs"
    ):
        sidecar_settings("a", {"kind": "vllm", "max_num_seq": 3})


def test_a_point_json_written_before_the_split_still_reads():
    """Before the split each sidecar carried every kind's keys (point.json of a running sweep)."""
    old = {"kind": "memory_server", "answer": "a", "model": None, "dtype": "auto", "max_num_seqs": 8, "top_k": 5}
    spec = SidecarConf.of(old)
    assert spec.settings == MemoryServerSidecar(answer="a", top_k=5)
    assert "model" not in spec.flat() and SidecarConf.of(json.loads(json.dumps(spec.flat()))) == spec


def test_each_task_kind_builds_its_command_and_key_environment(tmp_path):
    specs = {
        "answer": sidecar_settings("answer", {"kind": "vllm", "model": "/m", "served_model_name": "ans"}),
        "memory": sidecar_settings("memory", {"kind": "memory_server", "answer": "answer", "top_k": 7}),
    }
    planned = {
        n: sidecars.Sidecar(name=n, spec=s, host="127.0.0.1", port=p, key=f"key-{n}", log_path=tmp_path / n)
        for (n, s), p in zip(specs.items(), (18000, 5005), strict=True)
    }
    cmd = sidecars.build_command(planned["memory"], planned)
    assert cmd[1:] == [
        *("-m", "grpokit.tasks.memalpha.server", "--host", "127.0.0.1", "--port", "5005"),
        *("--answer-base-url", "http://127.0.0.1:18000/v1", "--answer-model", "ans"),
        *("--top-k", "7", "--concurrency", "8", "--timeout-s", "60.0", "--max-prompt-tokens", "30000"),
    ]
    assert sidecars.client_env(planned) == {"VLLM_API_KEY": "key-answer", "GRPOKIT_MEMORY_SERVER_KEY": "key-memory"}


# ---- no experiment file restates a sidecar default ----------------------------------------------


def _file_sidecars(path: Path) -> tuple[dict, list[str]]:
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    bases = [d for d in data.get("defaults", []) if isinstance(d, str) and d not in ("_self_",)]
    return data.get("sidecars") or {}, bases


def _inherited(directory: Path, bases: list[str]) -> dict:
    """``sidecars`` as the files ``bases`` (and theirs) set them, later files winning."""
    out: dict = {}
    for base in bases:
        path = directory / f"{base}.yaml"
        if not path.exists():
            continue
        own, more = _file_sidecars(path)
        for name, keys in [*_inherited(directory, more).items(), *own.items()]:
            out.setdefault(name, {}).update(keys or {})
    return out


def restatements(path: Path) -> list[str]:
    """``sidecars.<name>.<key>`` lines of ``path`` that set the value already in effect without them:
    the one a file it extends sets, else the default of the key for the sidecar's kind."""
    own, bases = _file_sidecars(path)
    inherited = _inherited(path.parent, bases)
    kinds = sidecar_kind_settings()
    found = []
    for name, keys in own.items():
        before = inherited.get(name, {})
        kind = (keys or {}).get("kind", before.get("kind"))
        defaults = {**_defaults(SidecarConf), **(_defaults(kinds[kind]) if kind in kinds else {})}
        for key, value in (keys or {}).items():
            if key == "kind":
                continue
            was = before.get(key, defaults.get(key, dataclasses.MISSING))
            if value == was and not isinstance(value, bool) ^ isinstance(was, bool):
                found.append(f"{path}: sidecars.{name}.{key}: {value!r} is the value without it; remove the line")
    return found


@pytest.mark.parametrize(
    "path", [p for d in EXPERIMENT_DIRS if d.is_dir() for p in sorted(d.glob("*.yaml"))], ids=lambda p: p.name
)
def test_no_experiment_file_restates_a_sidecar_default(path):
    assert restatements(path) == []


def test_a_restated_sidecar_default_is_found(tmp_path):
    (tmp_path / "base.yaml").write_text("sidecars:\n  llm:\n    kind: vllm\n    max_num_seqs: 4\n")
    (tmp_path / "mine.yaml").write_text(
        "defaults:\n  - base\n  - _self_\nsidecars:\n  llm:\n    max_model_len: 2048\n    max_num_seqs: 8\n"
        "    placement: shared\n  mem:\n    kind: memory_server\n    top_k: 20\n    timeout_s: 60\n    tokenizer: t\n"
    )
    assert [line.split(": ")[1] for line in restatements(tmp_path / "mine.yaml")] == [
        "sidecars.llm.max_model_len",
        "sidecars.llm.placement",
        "sidecars.mem.top_k",
        "sidecars.mem.timeout_s",
    ]  # max_num_seqs: 8 undoes the base file's 4; it is no restatement


def test_the_kit_package_file_of_each_reward_exists():
    for task in tasks().values():
        if task.reward:
            module = task.reward.partition(":")[0]
            assert package_file(module.removeprefix("grpokit.").replace(".", "/") + ".py").is_file()


def test_argparse_of_the_sidecar_flags_round_trips():
    """What the sidecar writes, the server's own parser reads back to the same settings."""
    from grpokit.tasks.memalpha.settings import add_flags, options_of

    parser = argparse.ArgumentParser()
    add_flags(parser, ServerOptions)
    options = ServerOptions(top_k=3, concurrency=2, timeout_s=1.5, max_prompt_tokens=100, tokenizer="t")
    argv = [
        x for f in dataclasses.fields(options) for x in (f"--{f.name.replace('_', '-')}", str(getattr(options, f.name)))
    ]
    assert ServerOptions(**options_of(parser.parse_args(argv), ServerOptions)) == options


def test_a_sidecar_key_left_to_its_default_is_set_without_a_plus():
    """Removing a restatement from an experiment file keeps ``sidecars.<name>.<key>=v`` working."""
    from grpokit.validate.command_line import check

    argv, problems = check(["experiment=memalpha_grpo", "sidecars.answer_llm.start_timeout_s=120"])
    assert (argv[-1], problems) == ("++sidecars.answer_llm.start_timeout_s=120", [])
    _, problems = check(["experiment=memalpha_grpo", "sidecars.nosuch.start_timeout_s=120"])
    assert [p.key for p in problems] == ["sidecars.nosuch.start_timeout_s"]  # no such sidecar: still refused
