"""The tool_memory task's two verl tools: ``search_memory(query)`` and ``read_memory(memory_id)``.

Both are native ``verl.tools.base_tool.BaseTool`` subclasses registered in ``tool_config.yaml``
(``TOOL_CONFIG_PATH``) and driven by verl's ``ToolAgentLoop`` (``agent_name="tool_agent"``).

Lifecycle, as ``ToolAgentLoop._call_tool`` (verl 0.9.1) runs it for every single tool call:
``create(create_kwargs=row.extra_info.tools_kwargs[<tool>].create_kwargs)`` -> ``execute(instance_id,
arguments, agent_data=<the rollout's AgentData>)`` -> ``release(instance_id)``. A tool instance
therefore lives for one call only, while the tool object itself is shared by every rollout that an
``AgentLoopWorker`` runs concurrently. Per-rollout state (the memory store and the call log) is kept
in a ``MemorySession`` attached to that rollout's ``AgentData`` and keyed by its ``request_id``: it
dies with the rollout, so concurrent rollouts of different samples, and the n samples of one
prompt (each has its own ``AgentData`` and request id), never see each other's calls. It is not
kept in a tool-wide dict keyed by request id because nothing tells the tool when a rollout ends
(``release`` is per call), and with ``rollout.full_determinism=True`` verl reuses request ids
(``det-<priority>``) across steps, so such a dict would both grow and leak old stores.

Rewards (the reference account's toy task): search pays 0.25 for a non-empty query, read pays 0.75
for reading the target memory. With ``reward_once_per_rollout: true`` in the tool's config (the
default) each is paid at most once per rollout, so the summed tool reward (capped at 1.0 by the
reward function) is reached only by searching and then reading the target, not by repeating a
search four times.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

from pydantic import BaseModel, ValidationError, field_validator
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from grpokit.paths import kit_command

log = logging.getLogger(__name__)

TOOL_CONFIG_PATH: Path = Path(__file__).with_name("tool_config.yaml")
"""Absolute path of the task's verl tool config (``rollout.multi_turn.tool_config_path``)."""

NOT_FOUND = "NOT_FOUND"
SEARCH_REWARD = 0.25
READ_TARGET_REWARD = 0.75
FALLBACK_HITS = 2
"""How many memories (the first ones in the store) search returns when no memory matches."""

# Private attribute on verl's AgentData (verl itself sets ``_active_tools`` the same way); not
# ``extra_fields``, because every ``extra_fields`` key becomes a column of the training batch.
_SESSIONS_ATTR = "_grpokit_tool_memory_sessions"


class Memory(BaseModel):
    """One memory of a store: ``{"id": "mem_1a2b3c", "text": "The user ..."}``."""

    id: str
    text: str


class MemoryStore(BaseModel):
    """The ``create_kwargs`` of both tools (``extra_info.tools_kwargs.<tool>.create_kwargs``).

    ``memories`` may arrive as any sequence (a numpy array when read back with pandas).
    """

    memories: list[Memory]
    target_id: str
    target_answer: str = ""

    @field_validator("memories", mode="before")
    @classmethod
    def _sequence_to_list(cls, value: Any) -> Any:
        if isinstance(value, Iterable) and not isinstance(value, str | bytes | dict):
            return list(value)
        return value

    @classmethod
    def from_create_kwargs(cls, create_kwargs: dict[str, Any] | None, tool_name: str) -> MemoryStore:
        """Validate one tool's ``create_kwargs``; ``ValueError`` names the row key to fix."""
        try:
            return cls.model_validate(dict(create_kwargs or {}))
        except ValidationError as exc:
            raise ValueError(
                f"extra_info.tools_kwargs.{tool_name}.create_kwargs is not a memory store "
                f"({{'memories': [{{'id', 'text'}}], 'target_id', 'target_answer'}}): {exc}. "
                f"Regenerate the data with `{kit_command('prepare-data', 'tool_memory --out DIR')}`."
            ) from exc


@dataclass
class MemorySession:
    """One rollout's view of its store: the store, the calls made so far, the rewards already paid.

    ``calls`` holds one dict per executed call: ``{"tool", "arguments", "result", "reward"}``.
    """

    store: MemoryStore
    calls: list[dict[str, Any]] = field(default_factory=list)
    paid: set[str] = field(default_factory=set)

    def pay_once(self, reward_name: str, amount: float, once: bool) -> float:
        """Return ``amount`` unless ``once`` and this rollout was already paid ``reward_name``."""
        if once and reward_name in self.paid:
            return 0.0
        self.paid.add(reward_name)
        return amount


def get_session(agent_data: Any, store: MemoryStore | None = None) -> MemorySession | None:
    """The ``MemorySession`` of ``agent_data``'s rollout (keyed by ``agent_data.request_id``).

    Creates it from ``store`` on the rollout's first tool call; returns None when it does not exist
    and no ``store`` is given.
    """
    sessions: dict[str, MemorySession] | None = getattr(agent_data, _SESSIONS_ATTR, None)
    if sessions is None:
        sessions = {}
        setattr(agent_data, _SESSIONS_ATTR, sessions)
    request_id = str(agent_data.request_id)
    if request_id not in sessions and store is not None:
        sessions[request_id] = MemorySession(store=store)
    return sessions.get(request_id)


class _MemoryTool(BaseTool):
    """Shared lifecycle: ``create`` validates the row's store, ``execute`` resolves the session.

    ``config`` (from ``tool_config.yaml``): ``type: native`` and optionally
    ``reward_once_per_rollout: bool`` (default True).
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None):
        super().__init__(config, tool_schema)
        self.reward_once_per_rollout = bool(config.get("reward_once_per_rollout", True))
        # instance_id -> (the row's store, the fallback session used when no agent_data is passed)
        self._instances: dict[str, tuple[MemoryStore, MemorySession]] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Register one call's instance; ``kwargs["create_kwargs"]`` is the row's memory store.

        Raises ``ValueError`` when the store is missing or malformed (the agent loop turns it into
        an error message for the model, with reward 0).
        """
        instance_id = instance_id or uuid4().hex
        store = MemoryStore.from_create_kwargs(kwargs.get("create_kwargs"), self.name)
        self._instances[instance_id] = (store, MemorySession(store=store))
        return instance_id, ToolResponse()

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)

    def _session(self, instance_id: str, agent_data: Any) -> MemorySession:
        if instance_id not in self._instances:
            raise KeyError(f"{self.name}: unknown instance_id {instance_id!r}; call create() before execute()")
        store, instance_session = self._instances[instance_id]
        if agent_data is None:
            # Outside ToolAgentLoop there is no rollout to key on: state lives for this instance only.
            return instance_session
        session = get_session(agent_data, store)
        assert session is not None
        return session

    @staticmethod
    def _record(session: MemorySession, tool: str, arguments: dict, result: Any, reward: float) -> None:
        session.calls.append({"tool": tool, "arguments": dict(arguments), "result": result, "reward": reward})


class SearchMemoryTool(_MemoryTool):
    """``search_memory(query)``: ids of the memories whose text contains ``query``.

    Matching is case-insensitive substring matching of the stripped query; when nothing matches
    (or the query is empty) the ids of the first ``FALLBACK_HITS`` memories are returned. The
    response text is a JSON list of ids, e.g. ``["mem_1a2b3c", "mem_4d5e6f"]``. Reward:
    ``SEARCH_REWARD`` for a non-empty query (once per rollout unless configured otherwise).
    Metrics: ``{"hits": int, "fallback": bool}``.
    """

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        session = self._session(instance_id, kwargs.get("agent_data"))
        query = str(parameters.get("query", "") or "").strip()
        needle = query.lower()
        memories = session.store.memories
        hits = [m.id for m in memories if needle and needle in m.text.lower()]
        fallback = not hits
        if fallback:
            hits = [m.id for m in memories[:FALLBACK_HITS]]
        reward = session.pay_once("search", SEARCH_REWARD, self.reward_once_per_rollout) if query else 0.0
        self._record(session, self.name, parameters, hits, reward)
        return ToolResponse(text=json.dumps(hits)), reward, {"hits": len(hits), "fallback": fallback}


class ReadMemoryTool(_MemoryTool):
    """``read_memory(memory_id)``: the memory's text, or ``NOT_FOUND`` for an unknown id.

    The id is compared after stripping whitespace. Reward: ``READ_TARGET_REWARD`` when the id is the
    store's ``target_id`` (once per rollout unless configured otherwise), else 0.
    Metrics: ``{"found": bool, "is_target": bool}``.
    """

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        session = self._session(instance_id, kwargs.get("agent_data"))
        memory_id = str(parameters.get("memory_id", "") or "").strip()
        text = next((m.text for m in session.store.memories if m.id == memory_id), None)
        is_target = text is not None and memory_id == session.store.target_id
        reward = session.pay_once("read_target", READ_TARGET_REWARD, self.reward_once_per_rollout) if is_target else 0.0
        response = text if text is not None else NOT_FOUND
        self._record(session, self.name, parameters, response, reward)
        return ToolResponse(text=response), reward, {"found": text is not None, "is_target": is_target}
