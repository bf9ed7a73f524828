"""Test double for ``vllm serve`` (which needs a GPU): an OpenAI-compatible chat server with canned answers.

Run: python tests/doubles/openai_chat_double.py --port P --served-model-name NAME --answers answers.json
     [--record requests.jsonl] [--startup-delay S]
Like vLLM it reads its key from VLLM_API_KEY and answers 401 without it. ``answers.json`` maps a
substring of the last user message to the reply; other prompts get "I do not know."
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import uvicorn
from fastapi import FastAPI, Header, HTTPException, Request


def build_app(served_name: str, answers: dict[str, str], api_key: str | None, record: str | None) -> FastAPI:
    app = FastAPI()
    lock = threading.Lock()

    def check(auth: str | None) -> None:
        if api_key and auth != f"Bearer {api_key}":
            raise HTTPException(status_code=401, detail="bad key")

    @app.get("/v1/models")
    def models(authorization: str | None = Header(default=None)):
        check(authorization)
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "double"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request, authorization: str | None = Header(default=None)):
        check(authorization)
        body = await request.json()
        if body.get("model") != served_name:
            raise HTTPException(status_code=404, detail=f"model {body.get('model')} not served")
        if record:
            with lock, open(record, "a") as f:
                f.write(json.dumps(body) + "\n")
        prompt = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
        text = next((a for key, a in answers.items() if key in prompt), "I do not know.")
        return {
            "id": "chatcmpl-double",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": served_name,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    return app


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--answers", required=True)
    p.add_argument("--record", default=None)
    p.add_argument("--startup-delay", type=float, default=0.0)
    a = p.parse_args()
    time.sleep(a.startup_delay)  # like vLLM loading weights before it listens
    with open(a.answers) as f:
        answers = json.load(f)
    app = build_app(a.served_model_name, answers, os.environ.get("VLLM_API_KEY"), a.record)
    uvicorn.run(app, host=a.host, port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
