"""TEST DOUBLE: a tiny HTTP sidecar that misbehaves on purpose (dies, ignores SIGTERM, leaves a child).

Stands in for a job's server (vLLM, the memory server) in the supervisor's tests. Not part of the
product. Auth like vLLM: with env ``VLLM_API_KEY`` or ``GRPOKIT_SIDECAR_KEY`` set, every path but
``/health`` needs ``Authorization: Bearer <key>`` (401 otherwise).

Flags:
    --host, --port: where to listen.
    --ready-after S: sleep S seconds before listening (a slow start).
    --exit-after S: exit with code 3 S seconds after start (before readiness when S < ready-after).
    --exit-when FILE: exit with code 4 as soon as FILE exists (a death at a moment the test picks).
    --ignore-sigterm: SIGTERM is ignored (only SIGKILL stops it).
    --spawn-child: start a grandchild in a session of its own that ignores SIGTERM and sleeps
        forever, with ``--tag`` on its command line (an orphan the job must still reap).
    --tag TEXT: a word put on the command lines (so tests can find the processes).

Run: ``python tests/doubles/misbehaving_sidecar.py --host 127.0.0.1 --port 8000 --exit-after 5``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _handler(key: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/health" and key and self.headers.get("Authorization") != f"Bearer {key}":
                self._send(401, b'{"error": "unauthorized"}')
                return
            self._send(200, b'{"ok": true}')

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args) -> None:
            print(fmt % args, flush=True)

    return Handler


def main() -> int:
    p = argparse.ArgumentParser(description="TEST DOUBLE: a misbehaving HTTP sidecar")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ready-after", type=float, default=0.0)
    p.add_argument("--exit-after", type=float, default=None)
    p.add_argument("--exit-when", default=None)
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--spawn-child", action="store_true")
    p.add_argument("--tag", default="misbehaving-sidecar")
    args = p.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
    if args.spawn_child:
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(100000)"
        child = subprocess.Popen([sys.executable, "-c", code, args.tag], start_new_session=True)
        print(f"spawned child {child.pid}", flush=True)
    if args.exit_after is not None:

        def _die() -> None:
            time.sleep(args.exit_after)
            print(f"exiting with 3 after {args.exit_after} s (--exit-after)", flush=True)
            os._exit(3)

        threading.Thread(target=_die, daemon=True).start()
    if args.exit_when is not None:

        def _die_on_file() -> None:
            while not os.path.exists(args.exit_when):
                time.sleep(0.2)
            print(f"exiting with 4: {args.exit_when} exists (--exit-when)", flush=True)
            os._exit(4)

        threading.Thread(target=_die_on_file, daemon=True).start()
    time.sleep(args.ready_after)
    key = os.environ.get("VLLM_API_KEY") or os.environ.get("GRPOKIT_SIDECAR_KEY")
    server = ThreadingHTTPServer((args.host, args.port), _handler(key))
    print(f"listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
