"""The memory server's settings, each default once: the server process, its command line and the
sidecar ``kind: memory_server`` are all built from these fields.

- :class:`ServerOptions`: what the experiment file may set (``sidecars.<name>.<field>``) and the
  server's flag of the same name (``--top-k`` for ``top_k``); the sidecar's command line writes them
  in field order, a None value left off (:mod:`grpokit.tasks.memalpha.sidecar`).
- :class:`MemoryServerSidecar`: the sidecar kind's keys: :class:`ServerOptions` plus ``answer``
  (the sidecar serving the answer LLM).
- :func:`add_flags` / :func:`options_of`: the server's argparse flags from the fields, and back.

Light on purpose (dataclasses only): ``grpokit.tasks.memalpha``'s ``TASK`` imports it at
composition time, long before the server's FastAPI.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

SERVER_KEY_ENV = "GRPOKIT_MEMORY_SERVER_KEY"
ANSWER_KEY_ENV = "GRPOKIT_ANSWER_API_KEY"


@dataclasses.dataclass(kw_only=True)
class ServerOptions:
    """The memory server's own settings (the experiment file's ``sidecars.<name>.<field>``, the
    server's ``--<field>`` flag); ``help`` of each field is its flag's help."""

    top_k: int = dataclasses.field(
        default=20, metadata={"help": "memory items kept per type (semantic, episodic) before the budget lowers it"}
    )
    concurrency: int = dataclasses.field(
        default=8, metadata={"help": "answer calls in flight at once, over all requests"}
    )
    timeout_s: float = dataclasses.field(
        default=60.0, metadata={"help": "seconds per answer call (connect, read, ...)"}
    )
    max_prompt_tokens: int = dataclasses.field(
        default=30_000, metadata={"help": "token budget for system prompt + question"}
    )
    tokenizer: str | None = dataclasses.field(
        default=None, metadata={"help": "the answer model's tokenizer (path or id) for the budget; none: a regex count"}
    )


@dataclasses.dataclass(kw_only=True)
class MemoryServerSidecar(ServerOptions):
    """``sidecars.<name>`` of ``kind: memory_server``: the server's options and its answer server."""

    # The sidecar (by name) serving the answer LLM (its URL and served_model_name are passed on).
    answer: str | None = None


def flag(name: str) -> str:
    """``top_k`` -> ``--top-k``."""
    return "--" + name.replace("_", "-")


def add_flags(parser: argparse.ArgumentParser, settings: type) -> None:
    """One ``--<field>`` flag per field of the dataclass ``settings`` (its type, default and help);
    a field without a default is a required flag."""
    for f in dataclasses.fields(settings):
        if not f.init or f.metadata.get("flag") is False:
            continue
        kind = {"int": int, "float": float}.get(str(f.type).replace(" | None", ""))
        kwargs: dict[str, Any] = {"help": f.metadata.get("help")}
        if f.default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = f.default
        parser.add_argument(flag(f.name), dest=f.name, **({"type": kind} if kind else {}), **kwargs)


def options_of(args: argparse.Namespace, settings: type) -> dict[str, Any]:
    """The values of ``settings``' flags in parsed ``args`` (the inverse of :func:`add_flags`)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(settings) if hasattr(args, f.name)}
