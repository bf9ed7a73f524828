"""TEST DOUBLE of ``vllm serve``: the kit's rehearsal answer server, :mod:`grpokit.rehearsal.answer_server`
(its docstring gives the HTTP API, the rule its answers follow and the test knobs: ``--fail-marker``,
``--delay-s``, ``--fail-status``, ``--fail-models``, ``POST /control``, ``GET /stats``).

vLLM needs a GPU; this answers the same HTTP API on a CPU so the memory server and the Mem-alpha
reward run for real in tests. Its default served name is ``answer-double``; ``app.state.double`` is the
server's counters (``app.state.answers``).

Run: ``VLLM_API_KEY=k python tests/doubles/openai_answer_double.py --host 127.0.0.1 --port 8000``.
"""

from __future__ import annotations

import sys
from typing import Any

from fastapi import FastAPI

from grpokit.rehearsal import answer_server
from grpokit.rehearsal.answer_server import *  # noqa: F403 - the tests call find_label, answer_text, serve_in_thread

DEFAULT_MODEL = "answer-double"
DoubleState = answer_server.ServerState


def create_double_app(*, model: str = DEFAULT_MODEL, **kwargs: Any) -> FastAPI:
    """:func:`grpokit.rehearsal.answer_server.create_app`; its counters also as ``app.state.double``."""
    app = answer_server.create_app(model=model, **kwargs)
    app.state.double = app.state.answers
    return app


def main(argv: list[str] | None = None) -> None:
    answer_server.main(argv, default_model=DEFAULT_MODEL)


if __name__ == "__main__":
    main(sys.argv[1:])
