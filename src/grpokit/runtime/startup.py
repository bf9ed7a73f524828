"""An attempt's start-up timeline: job start -> first generation request, phase by phase.

The marks come from the driver's own clock (job start, Ray ready, trainer launched) and from the
time stamps of the trainer's own log lines (``attempts/<k>/trainer.log``): verl's logger
(``INFO:2026-12-01 23:36:16,407:...``), Ray's (``2026-12-01 23:35:16,000\\tINFO ...``) and vLLM's
(``WARNING 12-01 23:38:22 [file.py:N] ...``, no year, 1-s resolution). The line texts are those of
verl 0.9.1 (``verl/trainer/ppo/v1``), Ray 2.60 and vLLM 0.24.0; a mark whose line is missing (another
version, a log level that hides it) is left out and named in ``not_seen``, never guessed.

Each phase ends at its mark and starts at the latest earlier mark present; ``took_s`` is that
difference. Written as ``attempts/<k>/startup.json`` (:func:`write`) by the driver:

    {"job_start": iso8601, "first_generation_s": float | null,
     "phases": [{"phase": str, "what": str, "at_s": float, "took_s": float, "source": str}],
     "engine": {"weights_s", "compile_s", "compile_cache": "hit" | "miss" | "off", "profile_run_s",
                "cuda_graphs_s", "kv_cache_gib", "init_engine_s"} (vLLM's own figures, from its INFO
                lines; absent ones left out),
     "not_seen": [phase]}

``at_s`` is seconds after job start. The log's times are the node's local time, read with this
process's time zone (the driver runs on the trainer's node).

Many of the lines that matter carry no stamp (the task runner's prints, vLLM's CUDA-graph progress
bars). The driver watches the log's size while the trainer starts (every poll, 0.5 s) and keeps
when each size was first seen (:class:`Arrivals`, written beside the log as
``trainer.log.arrivals``: ``<bytes> <epoch s>`` a line); such a line's time is when the log first
held it (source ``arrival``: Ray forwards a worker's output within about a second).
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import re
from collections.abc import Iterable
from pathlib import Path

from grpokit.run_folder import layout
from grpokit.run_folder.atomic import write_json_atomic
from grpokit.run_folder.startup_view import LABELS, one_line, read

__all__ = [  # read and one_line live with the run folder's readers; kept here for the writer's users
    "LABELS",
    "PHASES",
    "Arrivals",
    "Timeline",
    "build",
    "environment",
    "one_line",
    "parse_lines",
    "read",
    "write",
]

STARTUP_FILE = layout.STARTUP
#: vLLM's INFO lines carry the engine's own figures (weights, compile, cache hit, KV cache, CUDA
#: graphs); verl sets WARN for its workers unless the variable is set, so the kit sets INFO.
LOG_VARS = {"VLLM_LOGGING_LEVEL": "INFO"}


def environment(current: dict[str, str]) -> dict[str, str]:
    """:data:`LOG_VARS` not already set in `current` (the job's environment)."""
    return {k: v for k, v in LOG_VARS.items() if current.get(k) is None}


#: (phase, what it covers) in start-up order; the driver's three first, then the trainer's.
PHASES: tuple[tuple[str, str], ...] = (
    ("ray_ready", "job start -> the job's Ray cluster ready (kit)"),
    ("trainer_launched", "Ray ready -> verl's trainer process started (kit)"),
    ("verl_import", "python start, verl import, ray.init (verl)"),
    ("task_runner", "verl's task runner actor started, verl imported in it (verl, Ray)"),
    ("tokenizer", "config checked and printed, tokenizer loaded (verl)"),
    ("dataset", "datasets loaded, tokenized and filtered, dataloaders (verl)"),
    ("worker_group", "worker group created (verl, Ray actors)"),
    ("actor_ref", "FSDP actor and reference model built (verl)"),
    ("rollout_spawn", "rollout server actor started, vLLM imported (verl, vLLM)"),
    ("engine_start", "vLLM engine arguments read, engine core process spawned (vLLM)"),
    ("engine_compiled", "vLLM engine: weights, torch.compile, memory profile, KV cache (vLLM)"),
    ("engine_ready", "vLLM engine: CUDA graphs, API server up (vLLM)"),
    ("weight_sync", "checkpoint engine / weight sync set up (verl)"),
    ("checkpoint_load", "checkpoint loaded (a resumed attempt), ready to fit (verl)"),
    ("first_generation", "agent loop workers started, first generation request at vLLM (verl)"),
)
PHASE_NAMES = tuple(p for p, _ in PHASES)
_WHAT = dict(PHASES)
_ACTOR = re.compile(r"^(?:\x1b\[[0-9;]*m)?\((?P<actor>[A-Za-z0-9_]*) ?pid=(?P<pid>\d+)\)(?:\x1b\[[0-9;]*m)? ?")
_SUB = re.compile(r"^\((?P<proc>[A-Za-z0-9_]+) pid=(?P<pid>\d+)\) ")
_TS_VERL = re.compile(r"^(?:INFO|WARNING|ERROR|DEBUG):(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}):")
_TS_RAY = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\s+[A-Z]+ ")
_TS_VLLM = re.compile(r"^(?:INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d:\d\d:\d\d) \[")

# (phase, regex on the message): the first stamped line that matches is the mark.
_MARKS: tuple[tuple[str, re.Pattern], ...] = (
    ("verl_import", re.compile(r"Connected to Ray cluster")),
    ("dataset", re.compile(r"train and validate dataloader initialized")),
    ("worker_group", re.compile(r"create worker group")),
    ("actor_ref", re.compile(r"actor and ref model engine initialized|actor model engine initialized")),
    ("weight_sync", re.compile(r"checkpoint engine manager initialized")),
    ("checkpoint_load", re.compile(r"all initialize finished, ready to fit")),
)
# the engine core process is spawned (WARNING, always shown in a Ray actor) / starts (INFO)
_ENGINE_START = re.compile(r"We must use the `spawn` multiprocessing start method|Initializing a V1 LLM engine")
_ARRIVAL_MARKS: tuple[tuple[str, str, re.Pattern], ...] = (
    ("task_runner", "TaskRunner", re.compile(r"")),
    ("tokenizer", "TaskRunner", re.compile(r"^Using dataset class")),
)
_GRAPHS_START = re.compile(r"Capturing CUDA graphs|Graph capturing finished")
_ENGINE_READY = re.compile(r"\[api_router\.py|Starting vLLM server on|Application startup complete")
# vLLM 0.24 warns once, from input_processor.py, when the first prompt reaches the engine
_FIRST_REQUEST = re.compile(r"\[input_processor\.py")
# vLLM 0.24's INFO lines (vllm/model_executor/model_loader, vllm/compilation, vllm/v1/worker, vllm/v1/engine)
_ENGINE_FIGURES: tuple[tuple[str, re.Pattern], ...] = (
    ("weights_s", re.compile(r"Model loading took [\d.]+ GiB (?:memory )?and ([\d.]+) seconds")),
    ("compile_s", re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total|\(compilation: ([\d.]+) s")),
    ("profile_run_s", re.compile(r"Initial profiling/warmup run took ([\d.]+) s")),
    ("cuda_graphs_s", re.compile(r"Graph capturing finished in ([\d.]+) secs")),
    ("kv_cache_gib", re.compile(r"Available KV cache memory: ([\d.]+) GiB")),
    ("init_engine_s", re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")),
)
_CACHE_HIT = re.compile(r"Directly load the compiled graph")
_CACHE_OFF = re.compile(r"torch\.compile cache is disabled")
_CACHE_MISS = re.compile(r"Compiling a graph for|Cache the graph of")


class Arrivals:
    """When the trainer log first held each size: sizes (bytes, growing) and epoch times."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.times: list[float] = []

    def observe(self, size: int, t: float) -> None:
        """Record that the log held `size` bytes at epoch `t` (ignored unless it grew)."""
        if not self.sizes or size > self.sizes[-1]:
            self.sizes.append(size)
            self.times.append(t)

    def time_of(self, end_offset: int) -> float | None:
        """The first time the log held `end_offset` bytes (a line ending there); None: not seen."""
        i = bisect.bisect_left(self.sizes, end_offset)
        return self.times[i] if i < len(self.sizes) else None

    def write(self, path: Path) -> None:
        Path(path).write_text("".join(f"{n} {t:.3f}\n" for n, t in zip(self.sizes, self.times, strict=True)))

    @classmethod
    def read(cls, path: Path) -> Arrivals | None:
        """The pairs :meth:`write` wrote, or None when the file is absent or unreadable."""
        out = cls()
        try:
            for ln in Path(path).read_text().splitlines():
                n, t = ln.split()
                out.observe(int(n), float(t))
        except (OSError, ValueError):
            return None
        return out


@dataclasses.dataclass
class Timeline:
    """Marks (phase -> epoch seconds), their sources and vLLM's own figures for one attempt."""

    job_start: float
    marks: dict[str, float] = dataclasses.field(default_factory=dict)
    sources: dict[str, str] = dataclasses.field(default_factory=dict)
    engine: dict[str, float | str] = dataclasses.field(default_factory=dict)

    def phases(self) -> list[dict]:
        """One row per phase present, in start-up order (see the module docstring)."""
        rows, prev = [], self.job_start
        for name in PHASE_NAMES:
            at = self.marks.get(name)
            if at is None:
                continue
            rows.append(
                {
                    "phase": name,
                    "what": _WHAT[name],
                    "at_s": round(at - self.job_start, 1),
                    "took_s": round(max(0.0, at - prev), 1),
                    "source": self.sources.get(name, "trainer.log"),
                }
            )
            prev = max(prev, at)
        return rows

    def first_generation_s(self) -> float | None:
        at = self.marks.get("first_generation")
        return None if at is None else round(at - self.job_start, 1)

    def to_dict(self) -> dict:
        return {
            "job_start": dt.datetime.fromtimestamp(self.job_start).astimezone().isoformat(timespec="seconds"),
            "first_generation_s": self.first_generation_s(),
            "phases": self.phases(),
            "engine": dict(self.engine),
            "not_seen": [p for p in PHASE_NAMES if p not in self.marks and p != "checkpoint_load"],
        }


def _local_epoch(text: str, fraction_ms: str = "0") -> float:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp() + int(fraction_ms) / 1000.0


def line_time(message: str, year: int, month: int = 6) -> float | None:
    """The epoch time a log message (actor prefix removed) carries, or None.

    vLLM's stamps have no year: the job's `year` and `month` place it (a December stamp in a job
    started in January is from the year before, a January stamp in a December job the year after).
    """
    if m := _TS_VERL.match(message):
        return _local_epoch(m.group(1), m.group(2))
    if m := _TS_RAY.match(message):
        return _local_epoch(m.group(1), m.group(2))
    if m := _TS_VLLM.match(message):
        stamp_month = int(m.group(1))
        y = year - 1 if stamp_month - month > 6 else year + 1 if month - stamp_month > 6 else year
        return _local_epoch(f"{y}-{m.group(1)}-{m.group(2)} {m.group(3)}")
    return None


def split_actor(line: str) -> tuple[str | None, int | None, str]:
    """``(actor class or '' for a bare ``(pid=N)``, pid, message)`` of one Ray-prefixed line;
    ``(None, None, line)`` for a line the trainer's own process printed."""
    m = _ACTOR.match(line)
    if not m:
        return None, None, line
    return m.group("actor"), int(m.group("pid")), line[m.end() :]


def parse_lines(
    lines: Iterable[str | bytes],
    job_start: float,
    stop_at_first_generation: bool = True,
    arrivals: Arrivals | None = None,
) -> Timeline:
    """The trainer-side marks of :data:`PHASES` found in `lines` (the trainer log's lines, as read
    from the file: bytes give exact offsets for `arrivals`, the unstamped lines' times).

    The rollout server's marks are taken from its own process: its pid is the ``vLLMHttpServer``
    actor's, and its first stamped line, bare ``(pid=N)`` ones included, is ``rollout_spawn``.
    """
    start = dt.datetime.fromtimestamp(job_start)
    tl = Timeline(job_start=job_start)
    pending: dict[int, float] = {}  # pid -> first stamped time of a bare (pid=N) line
    server_pid: int | None = None
    offset = 0
    for raw in lines:
        if isinstance(raw, bytes):
            offset += len(raw)
            raw = raw.decode("utf-8", errors="replace")
        else:
            offset += len(raw.encode("utf-8", errors="replace"))
        line = raw.rstrip("\n")
        actor, pid, msg = split_actor(line)
        sub = _SUB.match(msg)
        inner = msg[sub.end() :] if sub else msg
        t = line_time(inner, start.year, start.month)
        arrived = arrivals.time_of(offset) if arrivals is not None else None
        if arrived is not None and actor:
            for phase, who, rx in _ARRIVAL_MARKS:
                if phase not in tl.marks and actor.startswith(who) and rx.search(inner):
                    tl.marks[phase] = arrived
                    tl.sources[phase] = "arrival"
            if actor == "vLLMHttpServer" and "engine_compiled" not in tl.marks and _GRAPHS_START.search(inner):
                tl.marks["engine_compiled"] = arrived if t is None else t
                tl.sources["engine_compiled"] = "arrival" if t is None else "trainer.log"
        if actor == "vLLMHttpServer" and server_pid is None:
            server_pid = pid
            first = pending.get(pid, t)
            if first is not None:
                tl.marks["rollout_spawn"] = first
        if t is None:
            continue
        if actor == "" and pid is not None:
            pending.setdefault(pid, t)
        for phase, rx in _MARKS:
            if phase not in tl.marks and rx.search(inner):
                tl.marks[phase] = t
        if actor == "vLLMHttpServer":
            if "rollout_spawn" not in tl.marks:
                tl.marks["rollout_spawn"] = t
            if "engine_start" not in tl.marks and _ENGINE_START.search(inner):
                tl.marks["engine_start"] = t
            if "engine_ready" not in tl.marks and _ENGINE_READY.search(inner):
                tl.marks["engine_ready"] = t
            for key, rx in _ENGINE_FIGURES:
                if key not in tl.engine and (m := rx.search(inner)):
                    tl.engine[key] = float(next(g for g in m.groups() if g is not None))
            if "compile_cache" not in tl.engine:
                if _CACHE_HIT.search(inner):
                    tl.engine["compile_cache"] = "hit"
                elif _CACHE_OFF.search(inner):
                    tl.engine["compile_cache"] = "off"
                elif _CACHE_MISS.search(inner):
                    tl.engine["compile_cache"] = "miss"
            if "first_generation" not in tl.marks and _FIRST_REQUEST.search(inner) and "engine_ready" in tl.marks:
                tl.marks["first_generation"] = t
                if stop_at_first_generation:
                    break
    return tl


ARRIVALS_FILE = layout.STARTUP_ARRIVALS


def build(
    attempt_dir: Path, job_start: float, driver_timings: dict[str, float], arrivals: Arrivals | None = None
) -> Timeline:
    """The attempt's timeline from the driver's timings (``ray_ready_s``, ``trainer_launched_s``:
    seconds after job start) and its ``trainer.log`` (absent: driver marks only); `arrivals`
    default to ``trainer.log.arrivals`` when there is one."""
    log = Path(attempt_dir) / "trainer.log"
    if arrivals is None:
        arrivals = Arrivals.read(Path(attempt_dir) / ARRIVALS_FILE)
    if log.exists():
        with log.open("rb") as fh:
            tl = parse_lines(fh, job_start, arrivals=arrivals)
    else:
        tl = Timeline(job_start=job_start)
    for phase, key in (("ray_ready", "ray_ready_s"), ("trainer_launched", "trainer_launched_s")):
        if driver_timings.get(key) is not None:
            tl.marks[phase] = job_start + float(driver_timings[key])
            tl.sources[phase] = "driver"
    return tl


def write(
    attempt_dir: Path, job_start: float, driver_timings: dict[str, float], arrivals: Arrivals | None = None
) -> dict:
    """Build the timeline (:func:`build`) and write ``<attempt_dir>/startup.json`` (and the
    `arrivals` given, ``trainer.log.arrivals``); returns it."""
    if arrivals is not None and arrivals.sizes:
        arrivals.write(Path(attempt_dir) / ARRIVALS_FILE)
    data = build(attempt_dir, job_start, driver_timings, arrivals).to_dict()
    write_json_atomic(Path(attempt_dir) / STARTUP_FILE, data)
    return data
