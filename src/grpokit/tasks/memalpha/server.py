"""The kit's memory server: answers questions from a writer's memory through an answer LLM.

API-compatible with ``memory_server.py`` of wangyu-ustc/Mem-alpha (docs/memalpha-notes.md):

- ``GET /health`` (no auth) asks the answer server for its models (``GET <answer>/models``):
  200 ``{"status": "healthy", "answer_model": str, "top_k": int, ...}`` when it answers and serves
  ``answer_model``, else 503 ``{"status": "unhealthy", "reason": str, ...}`` naming the answer
  server and its error (unreachable, an HTTP error, or the model not served). A change of health
  is logged once.
- ``POST /batch_process`` with JSON ``{"memories": [memory, ...], "questions": [[str, ...], ...],
  "max_tokens": int = 2048, "temperature": float = 0.7, "enable_thinking": bool = false}``;
  ``memories`` and ``questions`` are non-empty and of the same length; a memory is
  ``{"core": str | null, "semantic": [{id: text}], "episodic": [{id: text}]}``.
  Response ``{"result": [[answer, ...], ...], "status": "success" | "partial" | "failed",
  "processed_count": N, "failed_count": F, "errors": [[null | reason, ...], ...]}``, nested like
  ``questions``; ``N`` is the number of memories, ``F`` the number of failed items. A failed item
  (answer-model error, timeout, prompt over budget) gets the answer text ``"Error: <reason>"`` (as
  in Mem-α), its reason in ``errors`` and its kind in ``error_kinds`` (``answer_backend``: the
  answer server failed the call; ``prompt_too_long``: the memory does not fit the budget, a 0 for
  the writer as in Mem-α); the rest of the batch is answered; ``status`` is
  ``success`` only when no item failed (``failed`` when all did). Every failed answer call is
  logged. The reward (:mod:`grpokit.tasks.memalpha.reward`) counts ``errors`` and fails the job
  past its threshold. A bad request gets 400 ``{"error": reason}``; a missing or wrong key 401.

Differences from Mem-α, on purpose: FastAPI + asyncio instead of threaded Flask; one global bound
(``--concurrency``) on answer calls in flight; explicit timeouts; the answer server's chat endpoint
(vLLM applies the chat template, ``enable_thinking`` goes in ``chat_template_kwargs``) instead of
``/v1/completions`` with a locally applied template.

Keys come from the environment only: ``GRPOKIT_MEMORY_SERVER_KEY`` (clients must send
``Authorization: Bearer <key>``; unset = no auth) and ``GRPOKIT_ANSWER_API_KEY`` (sent to the answer
server; unset = "EMPTY", as vLLM without ``--api-key`` accepts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import openai
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from grpokit.tasks.memalpha.prompt import (
    Memory,
    PromptTooLongError,
    TokenCounter,
    build_prompt,
    hf_token_counter,
    parse_memory,
    regex_token_count,
)
from grpokit.tasks.memalpha.settings import ANSWER_KEY_ENV, SERVER_KEY_ENV, ServerOptions, add_flags, options_of

log = logging.getLogger(__name__)

#: How an item's reason starts when the answer server failed it (``error_kinds`` "answer_backend").
ANSWER_FAILED = "answer model call failed"


def error_kind(reason: str | None) -> str | None:
    """None (answered), ``answer_backend`` (the answer server failed) or ``prompt_too_long``."""
    if reason is None:
        return None
    return "answer_backend" if reason.startswith(ANSWER_FAILED) else "prompt_too_long"


@dataclass(kw_only=True)
class ServerSettings(ServerOptions):
    """Settings of one memory server process: :class:`~grpokit.tasks.memalpha.settings.ServerOptions`
    (the sidecar's keys, each default stated there) and these; the command line is built from the
    fields (:func:`build_arg_parser`)."""

    answer_base_url: str = field(metadata={"help": "answer server base URL, ending in /v1, e.g. http://h:8000/v1"})
    answer_model: str = field(metadata={"help": "served model name of the answer server (vLLM --served-model-name)"})
    answer_retries: int = field(
        default=1, metadata={"help": "the OpenAI client's retries of one answer call (429/5xx/connection)"}
    )
    # clients' bearer key (None: no auth) and the key sent to the answer server: from the environment only
    server_key: str | None = field(default=None, repr=False, metadata={"flag": False})
    answer_api_key: str | None = field(default=None, repr=False, metadata={"flag": False})

    def __post_init__(self) -> None:
        for name in ("top_k", "max_prompt_tokens", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServerSettings.{name} must be >= 1, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"ServerSettings.timeout_s must be > 0, got {self.timeout_s}")
        if self.answer_retries < 0:
            raise ValueError(f"ServerSettings.answer_retries must be >= 0, got {self.answer_retries}")

    @classmethod
    def keys_from_env(cls, **kwargs: Any) -> ServerSettings:
        """Settings with both keys read from the environment (see module doc)."""
        return cls(
            server_key=os.environ.get(SERVER_KEY_ENV) or None,
            answer_api_key=os.environ.get(ANSWER_KEY_ENV) or None,
            **kwargs,
        )


class BadRequest(ValueError):
    """A /batch_process body that does not follow the API; the message is the 400 reason."""


@dataclass(frozen=True)
class BatchRequest:
    memories: list[Memory]
    questions: list[list[str]]
    max_tokens: int
    temperature: float
    enable_thinking: bool


def parse_batch_request(body: Any) -> BatchRequest:
    """Validate a /batch_process JSON body; raises :class:`BadRequest` naming the bad key."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object with 'memories' and 'questions'")
    memories, questions = body.get("memories"), body.get("questions")
    if not memories or not questions:
        raise BadRequest("both 'memories' and 'questions' are required and must be non-empty lists")
    if not isinstance(memories, list) or not isinstance(questions, list):
        raise BadRequest("'memories' and 'questions' must be lists")
    if len(memories) != len(questions):
        raise BadRequest(
            f"'memories' has {len(memories)} entries but 'questions' has {len(questions)}; "
            "give one list of questions per memory"
        )
    for i, qs in enumerate(questions):
        if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs):
            raise BadRequest(f"questions[{i}] must be a list of strings")
    try:
        parsed = [parse_memory(m, where=f"memories[{i}]") for i, m in enumerate(memories)]
    except ValueError as e:
        raise BadRequest(str(e)) from e
    max_tokens = body.get("max_tokens", 2048)
    temperature = body.get("temperature", 0.7)
    enable_thinking = body.get("enable_thinking", False)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"'max_tokens' must be a positive integer, got {max_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
        raise BadRequest(f"'temperature' must be a number in [0, 2], got {temperature!r}")
    if not isinstance(enable_thinking, bool):
        raise BadRequest(f"'enable_thinking' must be true or false, got {enable_thinking!r}")
    return BatchRequest(parsed, questions, max_tokens, float(temperature), enable_thinking)


class MemoryAnswerer:
    """Builds prompts and calls the answer model, at most ``settings.concurrency`` calls at once."""

    def __init__(self, settings: ServerSettings, count_tokens: TokenCounter) -> None:
        self.settings = settings
        self.count_tokens = count_tokens
        self.semaphore = asyncio.Semaphore(settings.concurrency)
        self.client = openai.AsyncOpenAI(
            base_url=settings.answer_base_url,
            api_key=settings.answer_api_key or "EMPTY",
            # A plain number of seconds: openai 1.x takes httpx.Timeout, openai >= 3 sends through
            # httpx2 and refuses httpx's object (TypeError at start); both take a float.
            timeout=float(settings.timeout_s),
            max_retries=settings.answer_retries,
        )

    async def answer(self, memory: Memory, question: str, req: BatchRequest) -> tuple[str, str | None]:
        """``(answer, None)`` or ``("Error: <reason>", reason)`` for one (memory, question)."""
        try:
            # BM25 and the tokenizer are CPU work; keep the event loop free for other requests.
            prompt = await asyncio.to_thread(
                build_prompt,
                memory,
                question,
                top_k=self.settings.top_k,
                max_prompt_tokens=self.settings.max_prompt_tokens,
                count_tokens=self.count_tokens,
            )
        except PromptTooLongError as e:
            log.warning("prompt over budget: %s (question %.60r)", e, question)
            return f"Error: {e}", str(e)
        try:
            async with self.semaphore:
                response = await self.client.chat.completions.create(
                    model=self.settings.answer_model,
                    messages=prompt.messages(),
                    max_tokens=req.max_tokens,
                    temperature=req.temperature,
                    extra_body={"chat_template_kwargs": {"enable_thinking": req.enable_thinking}},
                )
            content = response.choices[0].message.content if response.choices else None
            return content or "", None
        except Exception as e:  # any failure of this one call marks this item only
            reason = f"{ANSWER_FAILED} (answer server {self.settings.answer_base_url}): {type(e).__name__}: {e}"
            log.warning("%s (question %.60r)", reason, question)
            return f"Error: {reason}", reason

    async def backend_health(self) -> str | None:
        """None when the answer server lists ``answer_model``, else why not (one line)."""
        where = f"answer server {self.settings.answer_base_url}"
        try:
            client = self.client.with_options(timeout=min(self.settings.timeout_s, 5.0), max_retries=0)
            served = [m.id async for m in client.models.list()]
        except openai.APIStatusError as e:
            return f"{where} answered HTTP {e.status_code} to GET /models: {str(e)[:300]}"
        except Exception as e:  # connection refused, timeout, a reply that is not the OpenAI API
            return f"{where} unreachable: {type(e).__name__}: {e}"
        if self.settings.answer_model not in served:
            return f"{where} does not serve model {self.settings.answer_model!r} (it serves {served})"
        return None

    async def batch(self, req: BatchRequest) -> tuple[list[list[str]], list[list[str | None]]]:
        jobs = [
            [self.answer(memory, q, req) for q in qs] for memory, qs in zip(req.memories, req.questions, strict=True)
        ]
        flat = await asyncio.gather(*(job for row in jobs for job in row))
        answers: list[list[str]] = []
        errors: list[list[str | None]] = []
        it = iter(flat)
        for row in jobs:
            pairs = [next(it) for _ in row]
            answers.append([a for a, _ in pairs])
            errors.append([e for _, e in pairs])
        return answers, errors


def _make_auth(server_key: str | None):
    async def check(request: Request) -> None:
        if server_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip(), server_key):
            raise HTTPException(
                status_code=401,
                detail=f"missing or wrong bearer key; send 'Authorization: Bearer <${SERVER_KEY_ENV}>'",
            )

    return check


def create_app(settings: ServerSettings, count_tokens: TokenCounter | None = None) -> FastAPI:
    """The memory server app. ``count_tokens`` defaults to the tokenizer named in ``settings``
    (loaded here, so a bad path fails at start) or :func:`regex_token_count`."""
    if count_tokens is None:
        count_tokens = hf_token_counter(settings.tokenizer) if settings.tokenizer else regex_token_count
    answerer = MemoryAnswerer(settings, count_tokens)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await answerer.client.close()

    app = FastAPI(title="grpokit memory server (Mem-α compatible)", lifespan=lifespan)
    app.state.answerer = answerer
    auth = _make_auth(settings.server_key)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        # Mem-α's clients read {"error": ...}; keep FastAPI's "detail" too.
        return JSONResponse({"error": exc.detail, "detail": exc.detail}, status_code=exc.status_code)

    last_health: dict[str, str | None] = {"reason": None}

    @app.get("/health")
    async def health() -> JSONResponse:
        reason = await answerer.backend_health()
        if reason != last_health["reason"]:
            if reason:
                log.warning("unhealthy: %s", reason)
            else:
                log.info("healthy: answer server %s serves %s", settings.answer_base_url, settings.answer_model)
            last_health["reason"] = reason
        body = {
            "status": "unhealthy" if reason else "healthy",
            **({"reason": reason} if reason else {}),
            "answer_base_url": settings.answer_base_url,
            "answer_model": settings.answer_model,
            "tokenizer": settings.tokenizer or "regex",
            "top_k": settings.top_k,
            "max_prompt_tokens": settings.max_prompt_tokens,
            "concurrency": settings.concurrency,
        }
        return JSONResponse(body, status_code=503 if reason else 200)

    @app.post("/batch_process", dependencies=[Depends(auth)])
    async def batch_process(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "body is not valid JSON"}, status_code=400)
        try:
            req = parse_batch_request(body)
        except BadRequest as e:
            log.info("400 on /batch_process: %s", e)
            return JSONResponse({"error": str(e)}, status_code=400)
        start = time.monotonic()
        answers, errors = await answerer.batch(req)
        num_failed = sum(e is not None for row in errors for e in row)
        (log.warning if num_failed else log.info)(
            "batch_process: %d memories, %d questions, %d failed, %.2fs",
            len(answers),
            sum(len(r) for r in answers),
            num_failed,
            time.monotonic() - start,
        )
        total = sum(len(r) for r in answers)
        state = "success" if not num_failed else ("failed" if num_failed == total else "partial")
        return JSONResponse(
            {
                "result": answers,
                "status": state,
                "processed_count": len(answers),
                "failed_count": num_failed,
                "errors": errors,
                "error_kinds": [[error_kind(e) for e in row] for row in errors],
            }
        )

    return app


def build_arg_parser() -> argparse.ArgumentParser:
    """The server's flags: ``--host``, ``--port``, ``--log-level`` and one per :class:`ServerSettings`
    field (its default and help)."""
    p = argparse.ArgumentParser(
        prog="python -m grpokit.tasks.memalpha.server",
        description=f"Mem-α-compatible memory server. Keys from env {SERVER_KEY_ENV} and {ANSWER_KEY_ENV}.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5005)
    add_flags(p, ServerSettings)
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_arg_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.tokenizer in ("", "none", "None"):  # --tokenizer none: the regex count
        args.tokenizer = None
    settings = ServerSettings.keys_from_env(**options_of(args, ServerSettings))
    log.info("memory server settings: %s (client auth %s)", settings, "on" if settings.server_key else "off")
    import uvicorn

    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level.lower())


if __name__ == "__main__":
    main()
