"""Reward of the Memory-RL task: the writer's memory JSON is scored by answering questions from it.

``score = answer_acc + 0.05 * format_score + 0.05 * compression_score`` (the reference account's
simplified Mem-α reward, docs/memalpha-notes.md):

- ``format_score`` is 1.0 when the writer's output (after dropping a ``<think>`` block and one
  surrounding markdown code fence) parses as a JSON object, else 0.0 and the raw text becomes one
  semantic memory.
- ``answer_acc`` is the mean over the row's questions of Mem-α's label check on the memory server's
  answers (:func:`score_answer`). A question whose answer call failed at the answer server (the
  memory server's ``error_kinds`` says ``answer_backend``) is not a wrong answer: it is left out of
  the mean and counted in ``memalpha_answer_errors``; a memory over the prompt budget still scores
  0, as in Mem-α.
- ``compression_score = clip(1 - memory_chars / source_chars, 0, 1)``; ``memory_chars`` is the
  length of the core text plus every semantic/episodic text (ids are not shown to the answer model,
  so they are not counted).

verl calls :func:`compute_score` (``reward.custom_reward_function.name=compute_score``); verl keeps
the keys other than ``score`` per sample (``reward_extra_info``: validation metrics
``val-aux/<source>/<key>/...`` and the rollout dumps). The memory server's bearer key comes from
env ``GRPOKIT_MEMORY_SERVER_KEY``. A scorer that cannot score fails loudly, never as a silent zero
that would train on noise: :class:`MemoryServerError` when the memory server stays unreachable
after the retries, :class:`AnswerBackendError` when more than ``max_answer_error_fraction`` (a
``reward_kwargs`` key, default 0.5) of one sample's answer calls failed at the answer server; each
sample with failed calls logs one warning line naming the memory server and the answer server's
error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from grpokit.paths import kit_command

log = logging.getLogger(__name__)

SERVER_KEY_ENV = "GRPOKIT_MEMORY_SERVER_KEY"
DEFAULT_MEMORY_SERVER_URL = "http://127.0.0.1:5005/batch_process"
FORMAT_WEIGHT = 0.05
COMPRESSION_WEIGHT = 0.05

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE_RE = re.compile(r"^```[A-Za-z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_BOXED = "\\boxed{"


class MemoryServerError(RuntimeError):
    """The memory server could not be reached or answered wrongly; fails the training step."""


class AnswerBackendError(MemoryServerError):
    """Too many of a sample's answer calls failed at the answer server; fails the training step."""


DEFAULT_MAX_ANSWER_ERROR_FRACTION = 0.5


def strip_think(text: str) -> str:
    """Drop ``<think>...</think>`` blocks, and everything up to a lone ``</think>`` (a think block
    whose opening tag was in the prompt, as Qwen3 templates do)."""
    text = _THINK_RE.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text.strip()


def parse_memory(solution_str: str) -> tuple[Any, float]:
    """``(parsed, 1.0)`` when the writer's output is a JSON object, else ``(raw text, 0.0)``."""
    text = strip_think(solution_str)
    fenced = _FENCE_RE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        parsed = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text, 0.0
    if not isinstance(parsed, dict):
        return text, 0.0
    return parsed, 1.0


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def _as_items(value: Any, prefix: str) -> list[dict[str, str]]:
    """Any JSON value as Mem-α's list of single-key ``{id: text}`` dicts; empty texts dropped."""
    if value is None:
        raw: list[tuple[str | None, Any]] = []
    elif isinstance(value, Mapping):
        raw = list(value.items())
    elif isinstance(value, list):
        raw = []
        for item in value:
            if isinstance(item, Mapping):
                raw.extend(item.items())  # a multi-key dict becomes one item per key
            else:
                raw.append((None, item))
    else:
        raw = [(None, value)]
    items = []
    for key, content in raw:
        text = _as_text(content)
        if text.strip():
            items.append({str(key) if key is not None else f"{prefix}{len(items) + 1}": text})
    return items


def normalize_memory(parsed: Any) -> tuple[dict[str, Any], int]:
    """The memory server's memory dict and its ``memory_chars``.

    ``parsed`` is the writer's JSON object (``core``, ``semantic``, ``episodic``; other keys are
    ignored, as the schema in the prompt has only these) or raw text, which becomes one semantic
    memory. Returns ``({"core": str, "semantic": [{id: text}], "episodic": [{id: text}]}, chars)``.
    """
    if not isinstance(parsed, Mapping):
        semantic = _as_items(_as_text(parsed), "m")
        memory = {"core": "", "semantic": semantic, "episodic": []}
    else:
        memory = {
            "core": _as_text(parsed.get("core")),
            "semantic": _as_items(parsed.get("semantic"), "s"),
            "episodic": _as_items(parsed.get("episodic"), "e"),
        }
    chars = len(memory["core"]) + sum(
        len(next(iter(item.values()))) for kind in ("semantic", "episodic") for item in memory[kind]
    )
    return memory, chars


def _first_boxed(text: str) -> str | None:
    start = text.find(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def score_answer(prediction: str, gold: Any) -> float:
    """Mem-α's check for label answers (``icl*``): drop a think block, take the first
    ``\\boxed{...}`` (else the whole answer), strip quotes and spaces; it must be all digits and
    equal ``gold`` as a string ("07" != "7"). Returns 1.0 or 0.0."""
    text = strip_think(prediction or "")
    boxed = _first_boxed(text)
    candidate = (boxed if boxed is not None else text).strip().strip("'\"`").strip()
    if not candidate.isdigit() or not candidate.isascii():
        return 0.0
    return 1.0 if candidate == str(gold).strip() else 0.0


def _questions_and_answers(ground_truth: Any) -> tuple[list[dict[str, Any]], int]:
    if isinstance(ground_truth, str):
        ground_truth = json.loads(ground_truth)
    if not isinstance(ground_truth, Mapping) or "questions_and_answers" not in ground_truth:
        raise ValueError(
            "ground_truth must be a dict with 'questions_and_answers' (and 'source_chars'); "
            f"rebuild the data with `{kit_command('prepare-data', 'memalpha')}`"
        )
    qas = ground_truth["questions_and_answers"]
    if isinstance(qas, str):
        qas = json.loads(qas)
    # From parquet, lists arrive as numpy arrays of dicts.
    qas = [dict(qa) for qa in list(qas)]
    source_chars = max(int(ground_truth.get("source_chars") or 1), 1)
    return qas, source_chars


async def ask_memory_server(
    memory: dict[str, Any],
    questions: Sequence[str],
    *,
    url: str,
    max_tokens: int,
    timeout_s: float,
    retries: int,
    backoff_s: float = 1.0,
) -> tuple[list[str], list[str | None]]:
    """The server's answers to ``questions`` about ``memory`` (one request, ``1 + retries`` tries),
    and per question the answer server's error (None when the call succeeded or the item failed
    for another reason, such as a prompt over budget).

    The errors come from the reply's ``error_kinds``/``errors``; a server without them (Mem-α's
    own) marks a failed call by an answer starting with ``"Error:"``. Retries connection errors,
    timeouts and 5xx with exponential backoff from ``backoff_s``; raises :class:`MemoryServerError`
    naming ``url`` when tries run out, at once on 4xx (a client or key problem that retrying does
    not fix), or when the reply does not have one answer per question.
    """
    payload = {
        "memories": [memory],
        "questions": [list(questions)],
        "max_tokens": max_tokens,
        "temperature": 0,
        "enable_thinking": False,
    }
    key = os.environ.get(SERVER_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    last_error = ""
    # trust_env=False: a site HTTP proxy (HTTP_PROXY on compute nodes) must not catch calls to the
    # job's own sidecar, the reference account had to set NO_PROXY for exactly this.
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), trust_env=False) as client:
        for attempt in range(retries + 1):
            if attempt:
                await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
            try:
                response = await client.post(url, json=payload, headers=headers)
            except httpx.HTTPError as e:
                last_error = f"{type(e).__name__}: {e}"
                log.warning("memory server %s try %d/%d failed: %s", url, attempt + 1, retries + 1, last_error)
                continue
            if response.status_code >= 500:
                last_error = f"HTTP {response.status_code}: {response.text[:300]}"
                log.warning("memory server %s try %d/%d failed: %s", url, attempt + 1, retries + 1, last_error)
                continue
            if response.status_code != 200:
                hint = f" (set {SERVER_KEY_ENV} to the server's key)" if response.status_code == 401 else ""
                raise MemoryServerError(
                    f"memory server {url} refused the request: HTTP {response.status_code} {response.text[:300]}{hint}"
                )
            try:
                body = response.json()
                answers = body["result"][0]
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise MemoryServerError(f"memory server {url} sent no 'result': {response.text[:300]}") from e
            if not isinstance(answers, list) or len(answers) != len(questions):
                raise MemoryServerError(
                    f"memory server {url} sent {len(answers) if isinstance(answers, list) else answers!r} "
                    f"answers for {len(questions)} questions"
                )
            answers = [a if isinstance(a, str) else _as_text(a) for a in answers]
            return answers, _backend_errors(body, answers)
    raise MemoryServerError(
        f"memory server {url} unreachable after {retries + 1} tries ({last_error}); check that the "
        "memory server sidecar is up (endpoints.json, sidecars/<name>.log) and the reward's "
        "memory_server_url"
    )


def _backend_errors(body: Mapping[str, Any], answers: list[str]) -> list[str | None]:
    """Per answer, the answer server's error (see :func:`ask_memory_server`)."""
    try:
        kinds, reasons = body["error_kinds"][0], body["errors"][0]
        if len(kinds) == len(reasons) == len(answers):
            return [str(r) if k == "answer_backend" else None for k, r in zip(kinds, reasons, strict=True)]
    except (KeyError, IndexError, TypeError):
        pass
    return [a[len("Error:") :].strip() if a.startswith("Error:") else None for a in answers]


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    memory_server_url: str = DEFAULT_MEMORY_SERVER_URL,
    max_tokens: int = 128,
    timeout_s: float = 90,
    retries: int = 3,
    backoff_s: float = 1.0,
    max_answer_error_fraction: float = DEFAULT_MAX_ANSWER_ERROR_FRACTION,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one writer output (see module doc).

    ``ground_truth`` is ``{"questions_and_answers": [{"question", "answer"}], "source_chars": int}``
    (as written by :mod:`grpokit.tasks.memalpha.data`). Returns ``{"score", "memalpha_acc",
    "memalpha_format", "memalpha_compression", "memalpha_memory_chars", "memalpha_answer_errors"}``,
    all floats; ``memalpha_answer_errors`` is the number of this sample's questions whose answer
    call failed at the answer server. Raises :class:`MemoryServerError` when the memory server
    cannot answer, :class:`AnswerBackendError` when that number over the row's questions is above
    ``max_answer_error_fraction`` (in [0, 1]; 1 never raises), ``ValueError`` on a ``ground_truth``
    without questions or a fraction outside [0, 1]. Unused verl kwargs
    (``reward_router_address``, ...) are ignored.
    """
    max_answer_error_fraction = float(max_answer_error_fraction)
    if not 0.0 <= max_answer_error_fraction <= 1.0:
        raise ValueError(f"reward_kwargs.max_answer_error_fraction must be in [0, 1], got {max_answer_error_fraction}")
    qas, source_chars = _questions_and_answers(ground_truth)
    parsed, format_score = parse_memory(solution_str or "")
    memory, memory_chars = normalize_memory(parsed)
    failed = 0
    if qas:
        answers, errors = await ask_memory_server(
            memory,
            [str(qa["question"]) for qa in qas],
            url=memory_server_url,
            max_tokens=max_tokens,
            timeout_s=timeout_s,
            retries=retries,
            backoff_s=backoff_s,
        )
        answered = [(a, qa) for a, qa, e in zip(answers, qas, errors, strict=True) if e is None]
        failed = len(qas) - len(answered)
        answer_acc = sum(score_answer(a, qa["answer"]) for a, qa in answered) / len(answered) if answered else 0.0
        if failed:
            reasons = sorted({e for e in errors if e is not None})
            message = (
                f"memory server {memory_server_url}: {failed} of {len(qas)} answer calls failed at the answer "
                f"server (data_source={data_source}): {reasons[0]}"
                + (f" (and {len(reasons) - 1} other error(s))" if len(reasons) > 1 else "")
            )
            log.warning("%s", message)
            if failed / len(qas) > max_answer_error_fraction:
                raise AnswerBackendError(
                    f"{message}; {failed / len(qas):.0%} of this sample's answer calls failed, above "
                    f"reward_kwargs.max_answer_error_fraction={max_answer_error_fraction}: the reward cannot "
                    "score. Check the answer server (attempts/<k>/sidecars/, the memory server's /health)"
                )
    else:
        log.warning("row without questions (data_source=%s); accuracy 0", data_source)
        answer_acc = 0.0
    compression = min(1.0, max(0.0, 1.0 - memory_chars / source_chars))
    return {
        "score": answer_acc + FORMAT_WEIGHT * format_score + COMPRESSION_WEIGHT * compression,
        "memalpha_acc": answer_acc,
        "memalpha_format": format_score,
        "memalpha_compression": compression,
        "memalpha_memory_chars": float(memory_chars),
        "memalpha_answer_errors": float(failed),
    }
