"""The memory server over real HTTP on 127.0.0.1, against the OpenAI-compatible TEST DOUBLE
(tests/doubles/openai_answer_double.py) that stands in for vLLM."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from grpokit.tasks.memalpha.server import ServerSettings, create_app

REPO = Path(__file__).resolve().parents[2]
SERVER_KEY = "memory-test-key-5f1c"
ANSWER_KEY = "answer-test-key-9d2e"
MODEL = "answer-double"


def _load_double() -> ModuleType:
    path = REPO / "tests" / "doubles" / "openai_answer_double.py"
    spec = importlib.util.spec_from_file_location("grpokit_test_openai_answer_double", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


double_mod = _load_double()


@contextmanager
def running_double(**kwargs) -> Iterator[tuple[str, object]]:
    app = double_mod.create_double_app(model=MODEL, api_key=ANSWER_KEY, **kwargs)
    with double_mod.serve_in_thread(app) as url:
        yield url, app.state.double


@contextmanager
def running_memory_server(double_url: str, **kwargs) -> Iterator[str]:
    settings = ServerSettings(
        **{
            "answer_base_url": f"{double_url}/v1",
            "answer_model": MODEL,
            "server_key": SERVER_KEY,
            "answer_api_key": ANSWER_KEY,
            **kwargs,
        }
    )
    with double_mod.serve_in_thread(create_app(settings)) as url:
        yield url


@pytest.fixture(scope="module")
def double():
    with running_double() as d:
        yield d


@pytest.fixture(scope="module")
def server(double) -> Iterator[str]:
    with running_memory_server(double[0], top_k=20, timeout_s=10) as url:
        yield url


def post(url: str, body, key: str | None = SERVER_KEY, timeout: float = 30) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    kwargs = {"content": body} if isinstance(body, str | bytes) else {"json": body}
    return httpx.post(f"{url}/batch_process", headers=headers, timeout=timeout, **kwargs)


def mapping_memory(pairs: list[tuple[str, str]]) -> dict:
    return {"core": "", "semantic": [{f"m{i}": f"{s} -> Label: {label}"} for i, (s, label) in enumerate(pairs)]}


def question(sentence: str) -> str:
    return (
        f"Sentence: {sentence}\nWhat are the labels for the above sentence? Put your final answer as \\boxed{{label}}."
    )


PAIRS = [("what movie should i see", "37"), ("will it rain on saturday", "9"), ("call a cab", "12")]


def test_health_needs_no_key(server):
    r = httpx.get(f"{server}/health", timeout=10)
    assert r.status_code == 200
    assert r.json()["status"] == "healthy" and r.json()["answer_model"] == MODEL


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_batch_process_needs_the_key(server, key):
    body = {"memories": [mapping_memory(PAIRS)], "questions": [[question("call a cab")]]}
    r = post(server, body, key=key)
    assert r.status_code == 401
    assert "GRPOKIT_MEMORY_SERVER_KEY" in r.json()["error"]


def test_response_is_nested_like_questions(server, double):
    body = {
        "memories": [
            mapping_memory(PAIRS),
            {"core": "nothing useful", "semantic": [], "episodic": []},
            {"semantic": [{"k": "x -> Label: 4"}]},
        ],
        "questions": [[question(s) for s, _ in PAIRS], [question("call a cab")], [question("x")]],
    }
    r = post(server, body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["status"] == "success" and data["processed_count"] == 3
    assert [len(row) for row in data["result"]] == [3, 1, 1]
    assert data["result"][0] == [f"The label is \\boxed{{{label}}}." for _, label in PAIRS]
    assert data["result"][1] == ["I don't know."]
    assert data["result"][2] == ["The label is \\boxed{4}."]
    assert data["errors"] == [[None, None, None], [None], [None]]


def test_request_options_and_selection_reach_the_answer_model(double):
    url, state = double
    many = [(f"sentence number {i} about topic {i % 7}", str(i)) for i in range(30)] + [("call a cab", "12")]
    with running_memory_server(url, top_k=3) as server:
        httpx.post(f"{url}/stats/reset")
        body = {
            "memories": [mapping_memory(many)],
            "questions": [[question("call a cab")]],
            "max_tokens": 64,
            "temperature": 0,
            "enable_thinking": True,
        }
        r = post(server, body)
    assert r.status_code == 200 and r.json()["result"] == [["The label is \\boxed{12}."]]
    (sent,) = httpx.get(f"{url}/stats").json()["bodies"]
    assert sent["model"] == MODEL and sent["max_tokens"] == 64 and sent["temperature"] == 0
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    system, user = sent["messages"]
    assert system["role"] == "system" and user == {"role": "user", "content": question("call a cab")}
    semantic = re.search(r"<semantic_memory>\n(.*?)\n</semantic_memory>", system["content"], re.DOTALL).group(1)
    assert semantic.splitlines()[0] == "1. call a cab -> Label: 12"  # BM25's best match first
    assert len(semantic.splitlines()) == 3  # top_k


def test_token_budget_and_too_long_item(double):
    url, _ = double
    many = [(f"sentence number {i} about cabs", str(i)) for i in range(40)]
    long_core = {"core": "filler " * 400, "semantic": [{"a": "call a cab -> Label: 12"}]}
    with running_memory_server(url, top_k=20, max_prompt_tokens=250) as server:
        httpx.post(f"{url}/stats/reset")
        body = {"memories": [mapping_memory(many), long_core], "questions": [[question("sentence number 7")]] * 2}
        r = post(server, body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["result"][0] == ["The label is \\boxed{7}."]
    assert data["errors"][0] == [None]
    assert data["result"][1][0].startswith("Error: ") and "over the budget of 250" in data["errors"][1][0]
    (sent,) = httpx.get(f"{url}/stats").json()["bodies"]  # the over-budget item never reached the model
    lines = re.search(r"<semantic_memory>\n(.*?)\n</semantic_memory>", sent["messages"][0]["content"], re.DOTALL)
    assert 1 <= len(lines.group(1).splitlines()) < 20  # k lowered to fit 250 tokens


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "not valid JSON"),
        ({"questions": [["q"]]}, "required"),
        ({"memories": [], "questions": []}, "required"),
        ({"memories": [{}], "questions": [["q"], ["q"]]}, "'memories' has 1 entries but 'questions' has 2"),
        ({"memories": [{"semantic": [{"a": "x", "b": "y"}]}], "questions": [["q"]]}, "exactly one key"),
        ({"memories": [{}], "questions": ["q"]}, r"questions\[0\] must be a list of strings"),
        ({"memories": [{}], "questions": [["q"]], "max_tokens": 0}, "max_tokens"),
        ({"memories": [{}], "questions": [["q"]], "enable_thinking": "yes"}, "enable_thinking"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_requests_get_400_with_the_reason(server, body, reason):
    r = post(server, body)
    assert r.status_code == 400
    assert re.search(reason, r.json()["error"]), r.json()


def test_one_failing_item_marks_only_that_item(server):
    body = {
        "memories": [mapping_memory(PAIRS), mapping_memory(PAIRS)],
        "questions": [
            [question("call a cab"), question("FAIL_ANSWER call a cab")],
            [question("what movie should i see")],
        ],
    }
    r = post(server, body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["result"][0][0] == "The label is \\boxed{12}."
    assert data["result"][0][1].startswith("Error: answer model call failed")
    assert "InternalServerError" in data["errors"][0][1]
    assert data["result"][1] == ["The label is \\boxed{37}."]
    assert data["errors"][0][0] is None and data["errors"][1] == [None]


def test_answer_calls_are_bounded_by_concurrency():
    with running_double(delay_s=0.2) as (url, state), running_memory_server(url, concurrency=3) as server:
        body = {"memories": [mapping_memory(PAIRS)] * 2, "questions": [[question("call a cab")] * 6] * 2}
        start = time.monotonic()
        r = post(server, body)
        elapsed = time.monotonic() - start
    assert r.status_code == 200 and all(a == "The label is \\boxed{12}." for row in r.json()["result"] for a in row)
    assert state.requests == 12
    assert state.max_in_flight == 3  # parallel, but never more than --concurrency
    assert elapsed >= 4 * 0.2 * 0.9  # 12 calls / 3 at a time x 0.2 s


def test_answer_timeout_marks_the_item():
    with (
        running_double(delay_s=3.0) as (url, _),
        running_memory_server(url, timeout_s=0.3, answer_retries=0) as server,
    ):
        start = time.monotonic()
        r = post(server, {"memories": [mapping_memory(PAIRS)], "questions": [[question("call a cab")]]})
        elapsed = time.monotonic() - start
    assert r.status_code == 200
    assert "Timeout" in r.json()["errors"][0][0]
    assert elapsed < 2.5


def test_double_serves_completions_and_models(double):
    url, _ = double
    headers = {"Authorization": f"Bearer {ANSWER_KEY}"}
    assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401
    models = httpx.get(f"{url}/v1/models", headers=headers, timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    prompt = "<|im_start|>system\n1. call a cab -> Label: 12<|im_end|>\n<|im_start|>user\n" + question("call a cab")
    r = httpx.post(
        f"{url}/v1/completions", headers=headers, json={"model": MODEL, "prompt": [prompt, "Sentence: x"]}, timeout=10
    )
    assert [c["text"] for c in r.json()["choices"]] == ["The label is \\boxed{12}.", "I don't know."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}: {proc.stdout.read()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url}/health not up within {timeout_s}s")


def test_command_lines_serve_with_keys_from_env(tmp_path):
    """Both processes as the job runtime starts them; keys only in the environment, never logged."""
    double_port, server_port = _free_port(), _free_port()
    env = {**os.environ, "VLLM_API_KEY": ANSWER_KEY, "GRPOKIT_ANSWER_API_KEY": ANSWER_KEY}
    env["GRPOKIT_MEMORY_SERVER_KEY"] = SERVER_KEY
    double_cmd = [sys.executable, str(REPO / "tests/doubles/openai_answer_double.py")]
    double_cmd += ["--host", "127.0.0.1", "--port", str(double_port), "--served-model-name", MODEL]
    server_cmd = [sys.executable, "-m", "grpokit.tasks.memalpha.server", "--host", "127.0.0.1"]
    server_cmd += ["--port", str(server_port), "--answer-base-url", f"http://127.0.0.1:{double_port}/v1"]
    server_cmd += ["--answer-model", MODEL, "--tokenizer", "none", "--top-k", "5", "--concurrency", "2"]
    server_cmd += ["--timeout-s", "10"]
    procs = []
    try:
        for cmd in (double_cmd, server_cmd):
            out = open(tmp_path / f"{len(procs)}.log", "w+")  # noqa: SIM115 - closed with the process
            procs.append((subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True), out))
        _wait_healthy(f"http://127.0.0.1:{double_port}", procs[0][0])
        _wait_healthy(f"http://127.0.0.1:{server_port}", procs[1][0])
        body = {"memories": [mapping_memory(PAIRS)], "questions": [[question("will it rain on saturday")]]}
        r = post(f"http://127.0.0.1:{server_port}", body)
        assert r.status_code == 200 and r.json()["result"] == [["The label is \\boxed{9}."]]
        assert post(f"http://127.0.0.1:{server_port}", body, key=None).status_code == 401
    finally:
        for proc, out in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            out.close()
    server_log = (tmp_path / "1.log").read_text()
    assert "batch_process" in server_log
    assert SERVER_KEY not in server_log and ANSWER_KEY not in server_log


# ---- the answer backend failing (issue 12 item 7) ------------------------------------------------


def health(server: str) -> tuple[int, dict]:
    r = httpx.get(f"{server}/health", timeout=15)
    return r.status_code, r.json()


def test_health_reflects_the_answer_backend(caplog):
    caplog.set_level(logging.INFO, logger="grpokit.tasks.memalpha.server")
    with running_double() as (url, _):
        with running_memory_server(url) as server:
            code, body = health(server)
            assert code == 200 and body["status"] == "healthy" and body["answer_base_url"] == f"{url}/v1"

            httpx.post(f"{url}/control", json={"fail_status": 500, "fail_models": True}, timeout=10)
            code, body = health(server)
            assert code == 503 and body["status"] == "unhealthy"
            assert f"answer server {url}/v1 answered HTTP 500" in body["reason"]

            httpx.post(f"{url}/control", json={"fail_status": None}, timeout=10)
            assert health(server)[0] == 200

        with running_memory_server(url, answer_model="not-served") as server:
            code, body = health(server)
            assert code == 503 and "does not serve model 'not-served'" in body["reason"] and MODEL in body["reason"]
        # the double is stopped from here on: the answer server is down
    with running_memory_server(url) as server:
        code, body = health(server)
    assert code == 503 and f"answer server {url}/v1 unreachable: APIConnectionError" in body["reason"]
    unhealthy = [r.getMessage() for r in caplog.records if r.getMessage().startswith("unhealthy: ")]
    assert len(unhealthy) == 3  # each change of health logged once, not once per poll


def test_batch_process_reports_answer_backend_errors_per_item(caplog):
    caplog.set_level(logging.INFO, logger="grpokit.tasks.memalpha.server")
    body = {
        "memories": [mapping_memory(PAIRS), {"core": "filler " * 400}],
        "questions": [[question("call a cab"), question("what movie should i see")], [question("call a cab")]],
    }
    with running_double(fail_status=500) as (url, _), running_memory_server(url, max_prompt_tokens=250) as server:
        r = post(server, body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["status"] == "failed" and data["failed_count"] == 3
    assert data["error_kinds"] == [["answer_backend", "answer_backend"], ["prompt_too_long"]]
    for reason in data["errors"][0]:
        assert reason.startswith(f"answer model call failed (answer server {url}/v1): InternalServerError")
        assert "500" in reason
    failed_calls = [r.getMessage() for r in caplog.records if r.getMessage().startswith("answer model call failed")]
    assert len(failed_calls) == 2  # one log line per failed answer call
    assert any("prompt over budget" in r.getMessage() for r in caplog.records)


def test_batch_process_status_is_partial_when_some_items_fail(server):
    body = {"memories": [mapping_memory(PAIRS)], "questions": [[question("call a cab"), question("FAIL_ANSWER x")]]}
    data = post(server, body).json()
    assert (data["status"], data["failed_count"]) == ("partial", 1)
    assert data["error_kinds"] == [[None, "answer_backend"]]
