"""REHEARSAL ONLY: the OpenAI-compatible answer server that stands in for ``vllm serve`` under ``rehearse=true``.

vLLM needs a CUDA GPU. In a rehearsal (docs/rehearsal.md) every sidecar of ``kind: vllm`` (Memory-RL's
``answer_llm``) and the chained eval's two servers (``after=[eval]``) run this server instead
(:func:`grpokit.config.rehearsal_point.rehearsal_sidecars`, :data:`grpokit.rehearsal.ANSWER_SERVER_CMD`),
so the memory server, the Mem-alpha reward and ``grpokit serve-eval``'s client run for real on a CPU
node. Its answers are made up by rule, not by a model: never a measurement. The kit's tests use
the same module as their TEST DOUBLE of ``vllm serve`` (``tests/doubles/openai_answer_double.py``).

HTTP API (vLLM's): ``GET /health`` (200, no key), ``GET /v1/models`` (``{"data": [{"id":
<served name>}]}``), ``POST /v1/chat/completions`` and ``POST /v1/completions`` (OpenAI's shapes,
one choice per prompt, usage zeros). A request for a model other than ``--served-model-name`` gets
404; with env ``VLLM_API_KEY`` set, ``/v1/*`` needs ``Authorization: Bearer <key>`` (401 otherwise).

Answers: the question's sentence is the text after the last ``Sentence:`` of the user turn (up to
the end of that line). The server looks for that sentence in the memory text (the system message,
or for ``/v1/completions`` the prompt before that last ``Sentence:``), case-insensitively, and
answers ``\\boxed{N}`` with the first integer found within 40 non-digit characters after it;
otherwise ``"I don't know."``. So a memory holding "what movie should i see -> Label: 37" is
answered ``\\boxed{37}``, as a perfect answer model would; a GSM8K question is answered
``"I don't know."`` (accuracy 0 in a rehearsal's eval).

Test knobs: a prompt containing ``--fail-marker`` (default ``FAIL_ANSWER``) gets HTTP 500; ``--delay-s``
holds each answer so tests can see concurrency; ``--fail-status N`` answers every completion
request with HTTP N (a broken engine behind a live server: ``/v1/models`` still answers), and
``--fail-models`` makes ``/v1/models`` fail too; ``POST /control`` with ``{"fail_status": N | null,
"fail_models": bool}`` changes both at run time. ``GET /stats`` reports ``requests``, ``in_flight``,
``max_in_flight`` and the last 200 request bodies, ``POST /stats/reset`` clears them.
Unknown flags (the rest of a ``vllm serve`` command line) are accepted and ignored.

Run: ``VLLM_API_KEY=k python -m grpokit.rehearsal.answer_server --host 127.0.0.1 --port 8000 --served-model-name m``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

DEFAULT_MODEL = "rehearsal-answer"
DEFAULT_FAIL_MARKER = "FAIL_ANSWER"

_SENTENCE_RE = re.compile(r"Sentence:[ \t]*([^\n]*)")


def find_label(memory_text: str, question_text: str) -> str | None:
    """The label the server answers: see module doc. ``None`` when memory does not hold it."""
    matches = _SENTENCE_RE.findall(question_text)
    if not matches or not matches[-1].strip():
        return None
    sentence = matches[-1].strip()
    found = re.search(re.escape(sentence) + r"[^0-9]{0,40}?(\d+)", memory_text, re.IGNORECASE)
    return found.group(1) if found else None


def answer_text(memory_text: str, question_text: str) -> str:
    label = find_label(memory_text, question_text)
    return f"The label is \\boxed{{{label}}}." if label is not None else "I don't know."


class ServerState:
    """Counters shared by the handlers (one event loop, so no lock is needed)."""

    def __init__(self, fail_status: int | None = None, fail_models: bool = False) -> None:
        self.fail_status = fail_status
        self.fail_models = fail_models
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: deque[dict[str, Any]] = deque(maxlen=200)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "bodies": list(self.bodies),
        }


def create_app(
    *,
    model: str = DEFAULT_MODEL,
    api_key: str | None = None,
    delay_s: float = 0.0,
    fail_marker: str = DEFAULT_FAIL_MARKER,
    fail_status: int | None = None,
    fail_models: bool = False,
) -> FastAPI:
    """The server's FastAPI app; ``app.state.answers`` is its :class:`ServerState` (the counters)."""
    app = FastAPI(title="REHEARSAL: OpenAI-compatible answer server standing in for vllm serve")
    state = ServerState(fail_status, fail_models)
    app.state.answers = state

    def _error(status: int, message: str, kind: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @app.middleware("http")
    async def _auth(request: Request, call_next):  # type: ignore[no-untyped-def]
        if api_key and request.url.path.startswith("/v1"):
            header = request.headers.get("authorization", "")
            if not secrets.compare_digest(header, f"Bearer {api_key}"):
                return _error(401, "Unauthorized", "invalid_request_error")
        return await call_next(request)

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({})

    @app.post("/control")
    async def control(request: Request) -> dict[str, Any]:
        body = await request.json()
        state.fail_status = body.get("fail_status")
        state.fail_models = bool(body.get("fail_models", False))
        return {"fail_status": state.fail_status, "fail_models": state.fail_models}

    @app.get("/v1/models", response_model=None)
    async def models() -> dict[str, Any] | JSONResponse:
        if state.fail_models and state.fail_status:
            return _error(state.fail_status, "answer server told to fail (fail_models)", "InternalServerError")
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "grpokit-rehearsal"}]}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return state.as_dict()

    @app.post("/stats/reset")
    async def reset() -> dict[str, Any]:
        state.requests = state.in_flight = state.max_in_flight = 0
        state.bodies.clear()
        return state.as_dict()

    async def _serve(body: dict[str, Any], texts: list[tuple[str, str]], kind: str) -> JSONResponse:
        state.requests += 1
        state.bodies.append(body)
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            if state.fail_status:
                return _error(state.fail_status, "answer server told to fail (fail_status)", "InternalServerError")
            if body.get("model") != model:
                return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
            if any(fail_marker in memory or fail_marker in question for memory, question in texts):
                return _error(500, "answer server told to fail for this prompt", "InternalServerError")
            answers = [answer_text(memory, question) for memory, question in texts]
        finally:
            state.in_flight -= 1
        created = int(time.time())
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if kind == "chat":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": answers[0]},
                "finish_reason": "stop",
            }
            return JSONResponse(
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex}",
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        choices = [{"index": i, "text": a, "finish_reason": "stop", "logprobs": None} for i, a in enumerate(answers)]
        return JSONResponse(
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": choices,
                "usage": usage,
            }
        )

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        messages = body.get("messages") or []
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list", "BadRequestError")
        memory = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
        users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
        return await _serve(body, [(memory, users[-1] if users else "")], "chat")

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        prompts = body.get("prompt")
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            return _error(400, "prompt must be a string or a list of strings", "BadRequestError")
        texts = []
        for p in prompts:
            cut = p.rfind("Sentence:")
            texts.append((p[:cut], p[cut:]) if cut >= 0 else (p, ""))
        return await _serve(body, texts, "completions")

    return app


@contextlib.contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", timeout_s: float = 20.0) -> Iterator[str]:
    """Run ``app`` with uvicorn on a free port of ``host`` in a daemon thread; yields its base URL.

    A test helper (real HTTP over loopback); stops the server on exit.
    """
    config = uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on {host} within {timeout_s}s")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)


def main(argv: list[str] | None = None, *, default_model: str = DEFAULT_MODEL) -> None:
    """Serve until killed (SIGTERM/SIGINT: uvicorn's clean stop); ``argv`` as ``vllm serve``'s flags."""
    p = argparse.ArgumentParser(description="REHEARSAL stand-in for vllm serve (rule-made answers, CPU only)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=default_model)
    p.add_argument("--delay-s", type=float, default=0.0)
    p.add_argument("--fail-marker", default=DEFAULT_FAIL_MARKER)
    p.add_argument("--fail-status", type=int, default=None, help="answer every completion with this HTTP status")
    p.add_argument("--fail-models", action="store_true", help="with --fail-status: /v1/models fails too")
    # Accepted and ignored so a `vllm serve` command line can be reused with this server.
    args, _unknown = p.parse_known_args(argv)
    app = create_app(
        model=args.served_model_name,
        api_key=os.environ.get("VLLM_API_KEY") or None,
        delay_s=args.delay_s,
        fail_marker=args.fail_marker,
        fail_status=args.fail_status,
        fail_models=args.fail_models,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
