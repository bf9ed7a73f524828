"""The in-job driver: one sweep point from start to ``status.json``, on every path.

The submitit array task, ``sbatch slurm/train.sbatch`` and a local run all call :func:`run_point`.
One attempt is a lifecycle, :meth:`Driver.run`:

- :meth:`Driver.open`: run-folder files, the attempt's log, the stop-signal handlers, the signal
  relay, ``status.json`` ``running``;
- :meth:`Driver.prepare`: verl's check of the point and the checkpoint folder's repair for resume
  (its CRC-32 read), each in a thread, while the sidecars and the job's own Ray start;
- :meth:`Driver.train`: the trainer under supervision (sidecars, Ray, hang watchdog, pruning);
- :meth:`Driver.close`, in ``finally``: stops everything the attempt started, decides its one
  immutable :class:`~grpokit.runtime.decisions.outcome.Outcome` (:func:`grpokit.runtime.decisions.outcome.decide`),
  writes the final ``status.json`` and requeues the task when that was decided.

How an attempt ends:

- trainer exits 0 at its target step with a final checkpoint -> ``completed``; exits 0 short of
  it or without that checkpoint -> ``failed`` (``early_exit`` / ``no_final_checkpoint``,
  :mod:`grpokit.runtime.decisions.completion`);
- USR2 (Slurm's warning before the time limit, or a preemption with a user signal) -> the trainer
  checkpoints at its next step boundary, then the job requeues itself (``scontrol requeue``; a
  bounded number of times for time limits, unbounded for preemptions) -> ``requeued``
  (:mod:`grpokit.runtime.decisions.stop_decision`);
- SIGTERM (preemption without a user signal, scancel) -> same request; the save and every stop
  fit into Slurm's KillWait less a margin (asked once, ``scontrol show config``;
  :func:`grpokit.runtime.decisions.stop_decision.sigterm_grace`), so the driver closes the attempt
  (``cancelled``, the reason naming the cancel) before Slurm's SIGKILL;
- a sidecar or Ray dies -> the trainer is stopped -> ``failed`` naming the component;
- no CUDA GPU and ``runtime.needs_gpu`` -> every stage but training -> ``skipped_no_gpu``.

The parts the driver starts and asks (validation, Ray, sidecars, trainer, the host's Slurm view,
the clock) are a :class:`~grpokit.runtime.parts.Parts`; the unit tests replace them with
in-process stand-ins (``tests/unit/test_driver_lifecycle.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from grpokit import procs
from grpokit.config.point import PointSpec
from grpokit.run_folder import (
    FINAL_STATES,
    AttemptFolder,
    RunFolder,
    StatusFile,
    heartbeat,
    liveness,
    write_json_atomic,
)
from grpokit.run_folder.metrics import read_jsonl, write_merged
from grpokit.runtime import compile_cache, control, startup, trackers, trainer_env
from grpokit.runtime.decisions import (
    checkpoints,
    completion,
    disk_full,
    folder_gone,
    resubmission,
    retry,
    stop_decision,
)
from grpokit.runtime.decisions.first_error import first_error_in_file
from grpokit.runtime.decisions.outcome import Exit, Happened, JobFailed, Outcome, decide
from grpokit.runtime.decisions.resume_from import ResumeRefused, check_world_size, prepare_resume
from grpokit.runtime.job_log import JobLog
from grpokit.runtime.parts import Parts, Trainer
from grpokit.runtime.processes import (
    kernels,
    pruning,
    ray_cluster,
    ray_resources,
    retry_job,
    shared_fs,
    stop_inquiry,
    trainer,
    watchdog,
)
from grpokit.runtime.processes.sidecars import SidecarError
from grpokit.validate import gpu_plan

log = logging.getLogger(__name__)

#: The signals that stop an attempt (each asks the trainer to checkpoint first).
STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)


class Driver:
    """Runs one attempt of one point (see the module docstring); ``parts`` defaults to the real ones."""

    def __init__(self, spec: PointSpec, parts: Parts | None = None):
        self.spec = spec
        self.parts = parts or Parts()
        self.host = self.parts.host
        self.run_dir = Path(spec.run_dir)
        self.folder = RunFolder(self.run_dir)  # every file name of docs/run-folder.md
        self.ctl = control.control_dir(self.run_dir)
        self.grace_s = float(spec.runtime.kill_grace_s)
        self.status: StatusFile | None = None
        self.attempt_dir: Path | None = None
        self.resubmission: str | None = None
        # The first stop signal: its number at once (later ones are ignored), then what Slurm said
        # (asked on the inquiry's thread right after the signal; complete before the stop decision).
        self.stop_signal: int | None = None
        self._inquiry = stop_inquiry.StopInquiry(
            self.host, save_deadline_s=float(spec.runtime.save_deadline_s), grace_s=self.grace_s
        )
        self.stop: stop_decision.StopRequest | None = None
        self.cluster: Any = None
        self.sidecars: dict[str, Any] = {}
        self.trainer: Trainer | None = None
        self.prune_watch: pruning.PruneWatch | None = None
        self.stacks_dir: Path | None = None  # faulthandler files of the trainer's processes (watchdog)
        self.timings: dict[str, float] = {}
        self.marks: dict[str, float] = {}  # seconds after job start (startup.json's driver marks)
        self.arrivals = startup.Arrivals()  # when the trainer log grew, until its first step
        self.t0 = time.monotonic()
        self.t0_wall = time.time()  # job start on the log lines' clock (startup.json)
        self._log = JobLog()
        self._handlers: dict[int, Any] = {}  # the stop signals' handlers before open()
        self._attempt_open = False
        self._outcome: Outcome | None = None
        self._reason_before_wait = ""  # status.json's reason under a wait's (_show_wait)
        self._retry: retry.Decision | None = None  # a crash retried (runtime.max_retries)
        self._stop_why: str | None = None  # the stop decision's line: why Slurm stopped the attempt
        self._beater: heartbeat.Beater | None = None  # touches <run>/heartbeat.json while the attempt runs
        self._run_dir_id: folder_gone.Identity = None  # the run folder's (device, inode) at the open

    # -- the lifecycle -----------------------------------------------------------------------------
    def run(self) -> int:
        """Run one attempt; returns the process exit status (:class:`~grpokit.runtime.decisions.outcome.Exit`)."""
        self.status = StatusFile(self.run_dir)
        if self._nothing_to_do():
            return Exit.OK.code
        happened = Happened()
        try:
            self.open()
            happened = self.train(*self.prepare())
        except BaseException as exc:  # the outcome records it; close() runs in finally either way
            happened = Happened(error=exc)
            if isinstance(exc, JobFailed | SidecarError | ray_cluster.RayStartError):
                (log.warning if self.stop_signal is not None else log.error)("%s", exc)
            else:
                log.exception("driver error")
            if not isinstance(exc, Exception):
                raise
        finally:
            outcome = self.close(happened)
        return outcome.exit.code

    def _nothing_to_do(self) -> bool:
        """A point in a final state runs again only on an explicit resubmission (resubmission.py);
        a requeue of its job by anyone else leaves the run folder untouched."""
        taken = resubmission.pending(self.run_dir, self.status.record)
        state = self.status.record.state
        if state in FINAL_STATES and taken is None:
            print(
                f"point {self.spec.name} is already {state} ({self.status.path}): nothing to do, "
                f"nothing changed. To run it again: grpokit resubmit {self.run_dir.parent}",
                file=sys.stderr,
                flush=True,
            )
            return True
        self.resubmission = taken or self.status.record.resubmission
        return False

    def open(self) -> None:
        """Open the attempt: run-folder files, its ``driver.log``, the stop-signal handlers, the
        signal relay (in Slurm), clean control files, ``status.json`` ``running``."""
        status = self.status
        attempt = status.attempt + 1
        self.attempt_dir = self.folder.attempt(attempt).path
        self._write_run_files()
        self._run_dir_id = _identity(self.run_dir)  # a later rm -rf or mv of it stops the point (folder_gone)
        self._log.install(AttemptFolder(self.attempt_dir).driver_log)
        self.host.become_subreaper()
        self._install_signals()
        self.host.start_signal_relay(AttemptFolder(self.attempt_dir).signal_relay_log)
        control.reset(self.ctl)
        previous_end = self._previous_end()
        status.start_attempt(
            target_step=self._target_step(),
            slurm=self.host.slurm_info(),
            previous_end=previous_end,
            rehearsal=self.spec.runtime.rehearsal,
        )
        self._attempt_open = True
        self._start_heartbeat(attempt)
        if self.resubmission is not None:
            status.set_resubmission(self.resubmission)
        log.info("point %s, attempt %d, run folder %s", self.spec.name, attempt, self.run_dir)

    def prepare(self) -> tuple[list[str], dict[str, str]]:
        """verl's check of the point (importing verl takes seconds) and the repair of its checkpoint
        folder for resume (:func:`prepare_resume`: the CRC-32 read of the step to resume, about 13 s
        cold for a 10 GB step) each run in a thread while the sidecars and Ray start; the trainer
        starts only once both are done and the check passed. Returns the trainer's command and
        environment.

        Raises:
            JobFailed: the point does not validate, or its checkpoint folder is refused (``invalid``).
            SidecarError, RayStartError: a sidecar or Ray did not start.
            OSError: a checkpoint folder could not be set aside or pruned (:func:`prepare_resume`).
        """
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="prepare")
        try:
            validation = pool.submit(self._validate)
            self._check_checkpoint_folder()  # before anything in it is changed
            resuming = pool.submit(self._prepare_resume)  # nothing the services start reads a global_step_N
            try:
                seeded = compile_cache.seed(self.spec.checkpoint_dir, self.run_dir.parent.glob("*/checkpoints"))
                if seeded:  # a first attempt: a sibling point's compiled kernels, not a compile of its own
                    self.status.update_attempt(compile_cache_seeded_from=seeded)
                env = {
                    **os.environ,
                    **compile_cache.environment(self.spec.checkpoint_dir, os.environ),  # reused on resume
                    **startup.environment(os.environ),  # vLLM's INFO lines: the engine's part of startup.json
                    **{k: str(v) for k, v in self.spec.runtime.env.items()},
                    **trainer.environment(self.run_dir, self.attempt_dir),
                    **trackers.environment(self.spec),  # W&B: one run per point across attempts
                }
                env = trainer.entry_environment(self.spec, env)  # a recipe's checkout on PYTHONPATH
                env = self._start_services(env)
            finally:
                # Joined whatever happened meanwhile (it renames folders and rewrites the tracker); its
                # error, as when it ran first, wins over a start-up error and over verl's check.
                self._record_resume(resuming.result())
                if self.stop_signal is None:
                    validation.result()  # a validation failure wins over a start-up error
        finally:
            # After a stop signal only Slurm's KillWait is left: the check is not waited for (the
            # trainer will not start in this attempt).
            pool.shutdown(wait=self.stop_signal is None)
        kernels.check_node(self.spec)  # a kernel this node cannot train with: one line, before the trainer
        cmd = trainer.command(self.spec, self._sidecar_overrides())
        names = trainer_env.record(self.folder.env, env)  # WANDB_*, runtime.env, Ray's, ... (secrets by name)
        trainer.write_command_file(self.folder.verl_cmd, cmd, names)
        return cmd, env

    def train(self, cmd: list[str], env: dict[str, str]) -> Happened:
        """Run the trainer under supervision, unless a stop signal came first or there is no GPU.

        Raises:
            JobFailed: a sidecar or Ray died, or the trainer hung.
        """
        verl_cmd = self.folder.verl_cmd
        if self.stop_signal is not None:
            return Happened(verl_cmd=verl_cmd)
        if self.spec.runtime.needs_gpu and not self.host.cuda_available():
            return Happened(gpu_missing=True, verl_cmd=verl_cmd)
        rc = self._supervise_trainer(cmd, env)
        done = None
        if rc == 0:
            # completed = target step reached with a final checkpoint (runtime/decisions/completion.py)
            done = completion.judge_attempt(self.spec, self.attempt_dir, _last_step(self.attempt_dir))
        verdict = pruning.recorded(self.ctl)
        saved = control.saved_marker(self.ctl)
        return Happened(
            trainer_started=True,
            trainer_exit=rc,
            completion=done,
            pruned=verdict.reason if verdict is not None else None,
            saved_step=saved["step"] if saved else None,
            trainer_log=AttemptFolder(self.attempt_dir).trainer_log,
            verl_cmd=verl_cmd,
        )

    def close(self, happened: Happened) -> Outcome:
        """Stop everything the attempt started (trainer, pruning watcher, sidecars, Ray, leftover
        processes, ports), decide the outcome, write the final ``status.json``, requeue the task
        when decided, take the attempt's log handlers off and give the signals back.

        Runs once on every path and never raises: a step that fails is logged and the next runs.
        """
        if self._outcome is not None:
            return self._outcome
        self._stop_parts()
        gone = folder_gone.reason(self.run_dir) if self._folder_gone() else None
        happened = dataclasses.replace(happened, disk_full=self._disk_full(happened), run_folder_gone=gone)
        if gone is None:
            self._write_startup()
        outcome = self._outcome = self._decide(happened)
        self._inquiry.close()
        if gone is None:  # a run folder deleted or moved is not recreated for status.json
            self._write_status(outcome)
        if self._beater is not None:
            self._beater.stop()
        in_slurm = self.host.in_slurm()
        if in_slurm:
            # The outcome is written: a late warning or SIGTERM (the time limit's, the job's end)
            # must neither start a new stop nor kill this process with a signal exit status,
            # which Slurm would record as the job's failure.
            for late in (signal.SIGUSR2, signal.SIGTERM):
                signal.signal(late, signal.SIG_IGN)
        first = outcome.reason.splitlines()[0] if outcome.reason else ""
        log.info("point %s: %s (%s) %s", self.spec.name, outcome.state, outcome.ended_by, first)
        if outcome.requeue:
            self.host.requeue_self()
            retry_job.exclude_and_delay(self._retry, self.host.task_id())  # a crash: other nodes, later
        elif outcome.state == "requeued":
            # Outside Slurm nothing requeues the point: the same command (or resubmit) resumes it.
            log.info("checkpointed and stopped; run the same command again to resume")
        self._log.remove()
        for sig, handler in self._handlers.items():
            if handler is not None and not (in_slurm and sig in (signal.SIGUSR2, signal.SIGTERM)):
                signal.signal(sig, handler)  # None: a handler not set from Python, left as it is
        return outcome

    # -- liveness ---------------------------------------------------------------------------------
    def _previous_end(self) -> liveness.AttemptEnd | None:
        """The end of an attempt a kill left open: its record, the end a reader recorded (Slurm's
        end state, the last beat) or the stderr of the job run that ran it
        (:func:`grpokit.run_folder.liveness.killed_attempt_end`)."""
        record = self.status.record
        if record.last_attempt is None or not record.last_attempt.is_open:
            return None
        try:
            old_job = liveness.attempt_job_id(record)
            runs = liveness.stderr_runs(self.run_dir.parent, old_job)
            # This start's own run is the file's last when the open attempt was this same job's.
            previous = (runs[:-1] if old_job and old_job == self.host.task_id() else runs)[-1:] or [None]
            found = liveness.killed_attempt_end(self.run_dir, record, previous[0])
        except Exception:
            log.exception("could not read why attempt %d ended", len(record.attempts))
            return None
        if found is not None:
            log.warning("attempt %d was left open: %s (%s)", len(record.attempts), found.reason, found.ended_by)
        return found

    def _node_failure(self) -> str | None:
        """``node <name> failed`` when this run's stderr (submitit's log) or this attempt's Ray logs
        hold Slurm's or srun's node-failure lines (:func:`grpokit.run_folder.liveness.node_failure`)."""
        try:
            runs = liveness.stderr_runs(self.run_dir.parent, self.host.task_id())
            lines = (runs[-1] if runs else []) + (liveness.srun_lines(self.attempt_dir) if self.attempt_dir else [])
            cause = liveness.node_failure(lines)
        except Exception:
            log.exception("could not read the job's stderr for a node failure")
            return None
        if cause is not None:
            log.warning("a node of the job failed: %s", cause.text)
        return cause.text if cause is not None else None

    def _start_heartbeat(self, attempt: int) -> None:
        """Write this attempt's record (``heartbeat.json``) and start touching it every ``runtime.heartbeat_s``."""
        beat_s = max(0.5, float(self.spec.runtime.heartbeat_s))
        try:
            path = heartbeat.open_record(self.run_dir, attempt=attempt, job_id=self.host.task_id(), beat_s=beat_s)
        except OSError as exc:
            log.warning("no heartbeat record (%s): a kill of this driver is decided from Slurm's evidence only", exc)
            return
        self._beater = heartbeat.Beater(path, beat_s).start()

    def _folder_gone(self) -> bool:
        """Whether the run folder noted at the open was deleted or moved away since
        (:mod:`~grpokit.runtime.decisions.folder_gone`)."""
        return folder_gone.gone(self._run_dir_id, _identity(self.run_dir))

    def _disk_full(self, happened: Happened) -> str | None:
        """``disk full writing <path>`` when the attempt's error or a folder it writes to says so."""
        try:
            named = disk_full.error_path(happened.error)
            if named is not None:
                return f"disk full writing {named or self.run_dir}"
            lines = [str(happened.error)] if happened.error is not None else []
            if happened.trainer_log is not None:
                lines += [first_error_in_file(happened.trainer_log) or ""]
            return disk_full.cause(lines, disk_full.free_bytes([self.run_dir, Path(self.spec.checkpoint_dir)]))
        except Exception:
            log.exception("could not check the disks")
            return None

    # -- stop signals ------------------------------------------------------------------------------
    def _grace(self) -> float:
        """Seconds a stopped process gets between SIGTERM and SIGKILL: ``runtime.kill_grace_s``, after a
        SIGTERM (or SIGINT) less, so that every stop and the close fit into Slurm's KillWait
        (:func:`grpokit.runtime.decisions.stop_decision.sigterm_grace`)."""
        request = self._inquiry.current() if self.stop_signal is not None else None
        stop_s = request.stop_grace_s if request is not None else None
        return stop_s if stop_s is not None else self.grace_s

    def _install_signals(self) -> None:
        self._inquiry.start()  # waits for the first stop signal, then asks Slurm about it
        for sig in STOP_SIGNALS:
            self._handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        """The stop signals' handler: records the signal and the clock and writes the save request
        (a plain file write); Slurm is asked on the inquiry's thread (:mod:`grpokit.runtime.processes.stop_inquiry`),
        never here."""
        if self.stop_signal is not None:
            return
        self.stop_signal = signum
        self._inquiry.arrived(signum, self.parts.clock())
        if not self._folder_gone():  # a deleted run folder is not recreated for the request
            control.request_save(self.ctl, reason=signal.Signals(signum).name)

    # -- the run folder ----------------------------------------------------------------------------
    def _write_run_files(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.folder.point.write_text(self.spec.to_json())
        write_json_atomic(self.folder.env, self.host.summary())
        ckpt = Path(self.spec.checkpoint_dir)
        ckpt.mkdir(parents=True, exist_ok=True)
        link = self.folder.checkpoints
        if ckpt != link and not link.exists():
            link.symlink_to(ckpt, target_is_directory=True)
        self.attempt_dir.mkdir(parents=True, exist_ok=True)

    def _target_step(self) -> int | None:
        value = self.spec.verl_value("trainer.total_training_steps")
        return int(value) if value not in (None, "null") else None

    # -- prepare -----------------------------------------------------------------------------------
    def _validate(self) -> Any:
        cfg, problems = self.parts.validate(self.spec)
        if problems:
            raise JobFailed("the point does not validate:\n" + "\n".join(map(str, problems)), "invalid")
        return cfg

    def _prepare_resume(self) -> dict:
        """:func:`prepare_resume` of the point's checkpoint folder (on the prepare thread)."""
        keep = self.spec.verl_value("trainer.max_actor_ckpt_to_keep")
        return prepare_resume(Path(self.spec.checkpoint_dir), keep=int(keep) if keep not in (None, "null") else None)

    def _record_resume(self, resume: dict) -> None:
        """The step resumed in the attempt's record; a damaged or partial checkpoint set aside is the
        point's reason while it runs."""
        if resume["note"]:
            self.status.set_reason(resume["note"])
            self.status.update_attempt(resume_step=resume["resume_step"], checkpoint_set_aside=resume["note"])
        else:
            self.status.update_attempt(resume_step=resume["resume_step"])

    def _check_checkpoint_folder(self) -> None:
        """Refuse (``invalid``) a checkpoint folder that other nodes do not see, or one whose newest
        checkpoint was saved at another GPU count than this point trains on."""
        ckpt = Path(self.spec.checkpoint_dir)
        nodes = self.host.node_names()
        if len(nodes) > 1:
            missing = shared_fs.unshared_nodes(ckpt, nodes[1:])
            if missing is None:
                log.warning("could not check that %s is shared by nodes %s (srun failed); going on", ckpt, nodes)
            elif missing:
                raise JobFailed(shared_fs.problem(ckpt, nodes[0], missing), "invalid")
            else:
                log.info("checkpoint folder %s is visible from every node %s", ckpt, nodes)
        nnodes, per_node = self.spec.verl_value("trainer.nnodes"), self.spec.verl_value("trainer.n_gpus_per_node")
        try:
            check_world_size(ckpt, int(nnodes or 1), int(per_node or 8))  # verl's defaults: 1 node, 8 GPUs
        except ResumeRefused as exc:
            raise JobFailed(str(exc), "invalid") from None

    def _start_services(self, base_env: dict[str, str]) -> dict[str, str]:
        """Start the sidecars and Ray (the GPU plan first); returns the trainer's environment."""
        nodes = self.host.node_names()
        host = "127.0.0.1" if len(nodes) <= 1 else self.host.node_address(nodes[0])
        fraction = self.spec.verl_value("actor_rollout_ref.rollout.gpu_memory_utilization")
        plan = gpu_plan.plan(self.spec, float(fraction) if fraction else gpu_plan.VERL_DEFAULT_ROLLOUT_FRACTION)
        visible = self.host.visible_gpus() or [str(i) for i in range(plan["gpus_per_node"])]
        plan["physical"] = {
            "trainer": [visible[i] for i in plan["trainer"]["gpus"] if i < len(visible)],
            **{n: [visible[i] for i in s["gpus"] if i < len(visible)] for n, s in plan["sidecars"].items()},
        }
        write_json_atomic(self.folder.gpu_plan, plan)

        api = self.parts.sidecars
        env = dict(base_env)
        self.sidecars = api.plan_sidecars(
            self.spec.sidecars, host=host, log_dir=AttemptFolder(self.attempt_dir).sidecars
        )
        env.update(api.client_env(self.sidecars))
        t = time.monotonic()
        for name, sc in self.sidecars.items():
            devices = plan["physical"].get(name)
            api.start(sc, self.sidecars, env=env, cuda_devices=",".join(devices) if devices else None)

        trainer_gpus = plan["physical"]["trainer"]
        ray_env = dict(env)
        if self.host.visible_gpus():
            ray_env["CUDA_VISIBLE_DEVICES"] = ",".join(trainer_gpus)
        ray_env.update(ray_cluster.auth_env(self.folder.secrets))
        num_cpus = self.host.cpus_for_ray(self.spec.cluster.cpus_per_task)
        self.cluster = self.parts.start_ray(
            log_dir=AttemptFolder(self.attempt_dir).ray,
            env=ray_env,
            num_cpus=num_cpus,
            num_gpus=len(trainer_gpus),
            nodes=nodes,
            multi_node_host=host,
            timeout_s=float(self.spec.runtime.ray_start_timeout_s),
            stop_requested=lambda: self.stop_signal is not None,
            abort=self._check_sidecars,  # a sidecar that died at once fails the attempt now, not after Ray's wait
            on_wait=self._show_wait,  # a wait for this node's Ray start slot is the point's reason meanwhile
            **ray_resources.cluster_sizes(self.spec.runtime, num_cpus),
        )
        self.timings["ray_ready_s"] = round(time.monotonic() - t, 2)
        self.marks["ray_ready_s"] = round(time.monotonic() - self.t0, 2)
        for sc in self.sidecars.values():
            api.wait_ready(sc)
        self.timings["sidecars_ready_s"] = round(time.monotonic() - t, 2)
        endpoints = {"ray": self.cluster.endpoints(), "sidecars": {n: s.endpoint() for n, s in self.sidecars.items()}}
        write_json_atomic(self.folder.endpoints, endpoints)
        ray_env["RAY_ADDRESS"] = self.cluster.address
        ray_env.update(self.cluster.client_env())  # a one-node Ray on loopback: its joiners too
        return ray_env

    def _show_wait(self, why: str | None) -> None:
        """Show what the attempt waits for as the point's reason in ``status.json`` (None: the wait is
        over, the reason before it comes back)."""
        if why is not None:
            self._reason_before_wait = self.status.record.reason or ""
        self.status.set_reason(why if why is not None else self._reason_before_wait)
        try:
            self.status.save()
        except OSError as exc:
            log.warning("could not show the wait in status.json: %s", exc)

    def _check_sidecars(self) -> None:
        """Raise :class:`SidecarError` when a started sidecar has exited (polled while Ray starts)."""
        check = getattr(self.parts.sidecars, "check_alive", None)
        if check is not None:
            check(self.sidecars)

    def _sidecar_overrides(self) -> list[str]:
        """``reward_kwargs`` that point the reward at the sidecars (``spec.reward_kwargs`` templates)."""
        out = []
        for sc in self.sidecars.values():
            for key, template in (sc.spec.reward_kwargs or {}).items():
                out.append(f"+reward.custom_reward_function.reward_kwargs.{key}={template.format(url=sc.url)}")
        return out

    # -- train -------------------------------------------------------------------------------------
    def _supervise_trainer(self, cmd: list[str], env: dict[str, str]) -> int:
        """Start the trainer and watch it until it exits; returns its exit status.

        After a stop signal the trainer gets the save budget
        (:class:`~grpokit.runtime.decisions.stop_decision.StopRequest`) to checkpoint and exit;
        past its deadline it is stopped.
        """
        attempt_dir = self.attempt_dir
        self.trainer = proc = self.parts.start_trainer(
            cmd, AttemptFolder(attempt_dir).trainer_log, env=env, cwd=self.run_dir
        )
        log.info(
            "trainer launched with Ray ready (pid %d, %.2f s after job start)", proc.pid, time.monotonic() - self.t0
        )
        self.timings["trainer_launched_s"] = self.marks["trainer_launched_s"] = round(time.monotonic() - self.t0, 2)
        self.stacks_dir = Path(env[watchdog.STACKS_ENV]) if env.get(watchdog.STACKS_ENV) else None
        policy = watchdog.HangPolicy.from_runtime(self.spec.runtime)
        hang_watch = watchdog.Watchdog(policy, AttemptFolder(attempt_dir).metrics) if policy else None
        self.prune_watch = pruning.start_watch(  # a verdict asks for a save, the point ends pruned
            self.spec.runtime,
            self.run_dir,
            attempt_dir,
            self.ctl,
            request_stop=lambda v: control.request_save(self.ctl, reason=f"pruned: {v.reason}"),
            alive=lambda: proc.poll() is None,
            force_stop=lambda: proc.stop(self._grace()),
        )
        ckpt_dir, saved = Path(self.spec.checkpoint_dir), None
        metrics, trainer_log = AttemptFolder(attempt_dir).metrics, AttemptFolder(attempt_dir).trainer_log
        timeline_written = False
        while True:
            rc = proc.poll()
            if self._folder_gone():  # the user took the point away: nothing more is written for it
                log.warning("%s", folder_gone.reason(self.run_dir))
                proc.stop(self.grace_s)
                return proc.wait()
            saved = checkpoints.record_saved(ckpt_dir, saved)  # each save's file sizes, once verl's tracker names it
            if rc is not None:
                return rc
            if not timeline_written:  # until the first step: when each line of the log arrived
                self._observe_log(trainer_log)
                if metrics.exists() and metrics.stat().st_size > 0:
                    timeline_written = self._write_startup()  # readable while the point runs
                    compile_cache.mark_complete(ckpt_dir)  # a step ran: the kernels are compiled, siblings may copy
            if self.stop_signal is not None:
                # On SIGTERM Slurm signals every process of the job: deaths are expected now.
                request = self._inquiry.current()  # Slurm's answers unknown until they come
                if request is not None and request.overdue(self.parts.clock()):
                    log.warning("trainer did not stop in time after the save request: stopping it")
                    proc.stop(self._grace())
                    return proc.wait()
                time.sleep(self.parts.poll_s)
                continue
            dead = [sc for sc in self.sidecars.values() if not sc.alive()]
            if dead:
                sc = dead[0]
                proc.stop(self._grace())
                raise JobFailed(
                    f"sidecar {sc.name} died (exit {sc.proc.returncode}) while the trainer ran; "
                    f"last lines of {sc.log_path}:\n{procs.tail(sc.log_path)}",
                    "sidecar_failed",
                )
            if self.cluster is not None and not self.cluster.alive():
                proc.stop(self._grace())
                raise JobFailed("the job's Ray cluster died while the trainer ran; see attempts/*/ray/", "ray_failed")
            if hang_watch is not None and (hang := hang_watch.poll()) is not None:
                self._stop_hung_trainer(hang)
            time.sleep(self.parts.poll_s)

    def _stop_hung_trainer(self, hang: watchdog.Hang) -> None:
        """Dump the stacks of the hung trainer's processes, stop it, raise ``hung`` (requeued within
        the time-out budget ``runtime.max_timeout_requeues``, which hangs share, else failed)."""
        log.error("trainer hung: %s; dumping stacks", hang.describe())
        stacks = self.attempt_dir / watchdog.STACKS_FILE
        remote = []
        if self.cluster is not None:
            remote = [
                (n, watchdog.remote_dump_command(n, self.cluster.address, self.stacks_dir))
                for n in self.cluster.nodes[1:]
            ]
        try:
            local = watchdog.local_targets(self.trainer.pid, self.cluster.head.pid if self.cluster else None)
            size = watchdog.write_stacks_file(stacks, hang, local, self.stacks_dir, remote)
            where = f"stacks of {len(local)} process(es) here, {len(remote)} other node(s) in {stacks} ({size} bytes)"
        except Exception as exc:  # the stop must happen whatever the dump did
            log.exception("stack dump failed")
            where = f"no stacks ({type(exc).__name__}: {exc})"
        self.trainer.stop(self._grace())
        decision = stop_decision.decide_hang(
            timeouts_so_far=self._timeouts_so_far(),
            max_timeout_requeues=int(self.spec.runtime.max_timeout_requeues),
            in_slurm=self.host.in_slurm(),
        )
        raise JobFailed(
            f"trainer hung: {hang.describe()}; {where}; trainer stopped, {decision.why}", "hung", decision.requeue
        )

    # -- close -------------------------------------------------------------------------------------
    def _stop_parts(self) -> None:
        """Stop what the attempt started, last started first stopped; each step runs whatever the
        one before did."""
        for what, step in (
            ("the trainer", self._stop_trainer),
            ("the pruning watcher", self._stop_prune_watch),
            ("the sidecars", lambda: self.parts.sidecars.stop(self.sidecars, self._grace())),
            ("Ray", self._stop_ray),
            ("leftover processes", lambda: self.host.clean_up(self._grace())),
        ):
            try:
                step()
            except Exception:
                log.exception("could not stop %s; the close goes on", what)

    def _stop_trainer(self) -> None:
        if self.stacks_dir is not None:
            watchdog.tidy_stacks_dir(self.stacks_dir)
        if self.trainer is not None:
            self.trainer.stop(self._grace())

    def _stop_prune_watch(self) -> None:
        if self.prune_watch is not None:
            self.prune_watch.join(timeout=5)  # it ends within a poll once the trainer is gone

    def _stop_ray(self) -> None:
        if self.cluster is not None:
            self.cluster.stop(self._grace())

    def _observe_log(self, path: Path) -> None:
        with contextlib.suppress(OSError):  # not created yet
            self.arrivals.observe(path.stat().st_size, time.time())

    def _write_startup(self) -> bool:
        """``attempts/<k>/startup.json`` (:mod:`grpokit.runtime.startup`); never fails the attempt."""
        if self.attempt_dir is None:
            return False
        try:
            startup.write(self.attempt_dir, self.t0_wall, self.marks, self.arrivals)
            return True
        except Exception:
            log.exception("could not write the start-up timeline")
            return False

    def _timeouts_so_far(self) -> int:
        return stop_decision.count_timeouts(self.status.record.attempts, self.status.record.resubmission)

    def _decide(self, happened: Happened) -> Outcome:
        """The outcome (:func:`grpokit.runtime.decisions.outcome.decide`), with the stop decision when a
        stop signal came; a failure to decide is itself a ``failed`` outcome."""
        try:
            stop = None
            self.stop = self._inquiry.complete(self._answer_wait_s())  # Slurm's answers about the signal
            if self.stop is not None:
                stop = self.stop.decide(
                    lead_s=float(self.spec.cluster.signal_delay_s),
                    timeouts_so_far=self._timeouts_so_far(),
                    max_timeout_requeues=int(self.spec.runtime.max_timeout_requeues),
                    in_slurm=self.host.in_slurm(),
                )
                log.info("stop decision: %s (%s)", stop.state, stop.why)
                self._stop_why = stop.why
            if happened.completion is None and not happened.gpu_missing:
                happened = dataclasses.replace(happened, node_failure=self._node_failure())
            outcome = decide(happened, signal_name=self.stop.name if self.stop else None, stop=stop)
            outcome, self._retry = retry_job.on_outcome(self.spec, self.status, outcome, self.attempt_dir, self.host)
            return outcome
        except Exception as exc:
            log.exception("could not decide the outcome")
            full = disk_full.error_path(exc)
            if full is not None:
                return Outcome("failed", "disk_full", f"disk full writing {full or self.run_dir}")
            return Outcome("failed", "failed", f"driver error while deciding the outcome: {type(exc).__name__}: {exc}")

    def _answer_wait_s(self) -> float:
        """How long the close waits for Slurm's answers about the stop signal: at most
        :data:`~grpokit.runtime.processes.stop_inquiry.ANSWER_WAIT_S`, and after a SIGTERM only
        until one process stop before Slurm's SIGKILL (less the margin)."""
        wait_s = stop_inquiry.ANSWER_WAIT_S
        request = self._inquiry.current()
        if request is not None and request.kill_at is not None:
            left = request.kill_at - self.parts.clock() - (request.stop_grace_s or 0.0)
            wait_s = min(wait_s, max(0.5, left))
        return wait_s

    def _write_status(self, outcome: Outcome) -> None:
        """Close the attempt in ``status.json`` (opening it first when the attempt failed before
        it was opened); merged metrics are a convenience and never cost the status."""
        status = self.status
        if self._beater is not None:  # first, in place: it reaches the readers when status.json cannot
            try:
                heartbeat.write_outcome(
                    self.run_dir,
                    attempt=status.attempt,
                    state=outcome.state,
                    ended_by=outcome.ended_by,
                    reason=outcome.reason,
                )
            except OSError:
                log.exception("could not write the outcome into %s", self.folder.heartbeat)
        try:
            if not self._attempt_open:
                status.start_attempt(
                    target_step=self._target_step(), slurm=self.host.slurm_info(), rehearsal=self.spec.runtime.rehearsal
                )
            if outcome.target_step is not None and status.record.target_step is None:
                status.set_target_step(outcome.target_step)  # verl's own count
            try:
                write_merged(self.run_dir)
            except Exception:
                log.exception("could not merge metrics")
            if self._stop_why and outcome.ended_by in ("preempted", "timeout", "cancelled"):
                # the attempt's reason tells preemption, an administrator's requeue, scancel, the time limit apart
                first = outcome.reason.splitlines()[0] if outcome.reason else ""
                if first.startswith(self._stop_why):  # a cancel's reason already names it
                    status.set_attempt_reason(first)
                else:
                    status.set_attempt_reason(f"{self._stop_why}; {first}" if first else self._stop_why)
            elif outcome.ended_by == "node_failed":  # the next attempt overwrites the point's reason: keep it here
                status.set_attempt_reason(outcome.reason.splitlines()[0])
            status.finish(
                outcome.state,
                ended_by=outcome.ended_by,
                reason=outcome.reason,
                exit_code=outcome.trainer_exit,
                last_step=_last_step(self.attempt_dir) if self.attempt_dir else None,
                timings=self.timings,
                slurm_state="REQUEUED" if outcome.requeue else None,
            )
        except Exception:
            log.exception("could not write %s", status.path)


def _identity(path: Path) -> folder_gone.Identity:
    """``(st_dev, st_ino)`` of the folder at ``path``; None when the path holds no folder."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _last_step(attempt_dir: Path) -> int | None:
    """The highest step in the attempt's ``metrics.jsonl`` (None when it logged none)."""
    metrics_path = AttemptFolder(attempt_dir).metrics
    steps = [r.get("step") for r in read_jsonl(metrics_path)] if metrics_path.exists() else []
    steps = [s for s in steps if isinstance(s, int)]
    return max(steps) if steps else None


def run_point(spec: PointSpec | dict | str, parts: Parts | None = None) -> int:
    """Run one attempt of a point (a :class:`PointSpec`, its dict, or its JSON) in this process;
    returns the exit status (:class:`~grpokit.runtime.decisions.outcome.Exit`)."""
    if isinstance(spec, str):
        spec = PointSpec.from_json(spec)
    elif isinstance(spec, dict):
        spec = PointSpec(**spec)
    return Driver(spec, parts).run()


def main() -> None:
    """``python -m grpokit.runtime.driver <point.json>``: run a point whose spec is in a file."""
    spec = PointSpec.from_json(Path(sys.argv[1]).read_text())
    sys.exit(run_point(spec))


if __name__ == "__main__":
    main()
