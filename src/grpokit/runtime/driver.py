"""The in-job driver: one sweep point from start to ``status.json``, on every path.

The submitit array task, ``sbatch slurm/train.sbatch`` and a local run all call :func:`run_point`.
It makes the run folder, validates the point again with the installed verl, repairs the checkpoint
folder for resume, starts the sidecars and the job's own Ray, runs the trainer under supervision
and stops everything it started, however the attempt ends:

- trainer exits 0 at its target step with a final checkpoint -> ``completed``; exits 0 short of
  it or without that checkpoint -> ``failed`` (``early_exit`` / ``no_final_checkpoint``,
  :mod:`grpokit.runtime.completion`);
- USR2 (Slurm's warning before the time limit, or a preemption with a user signal) -> the trainer
  checkpoints at its next step boundary, then the job requeues itself (``scontrol requeue``; a
  bounded number of times for time limits, unbounded for preemptions) -> ``requeued``;
- SIGTERM (preemption without a user signal, scancel) -> same request, a short grace, stop;
- a sidecar or Ray dies -> the trainer is stopped -> ``failed`` naming the component;
- no CUDA GPU and ``runtime.needs_gpu`` -> every stage but training -> ``skipped_no_gpu``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from grpokit.config.point import PointSpec
from grpokit.runtime import (
    completion,
    control,
    environment,
    procs,
    ray_cluster,
    ray_resources,
    resubmission,
    shared_fs,
    sidecars,
    signal_relay,
    stop_decision,
    trackers,
    trainer,
    watchdog,
)
from grpokit.runtime.first_error import first_error_in_file
from grpokit.runtime.metrics import read_jsonl, write_merged
from grpokit.runtime.ports import release_ports
from grpokit.runtime.resume import ResumeRefused, check_world_size, prepare_resume
from grpokit.runtime.status import FINAL_STATES, StatusFile, write_json_atomic
from grpokit.validate import gpu_plan, validate_point

log = logging.getLogger(__name__)

#: Exit codes of the driver process (the sbatch path exits with them).
EXIT_OK, EXIT_FAILED, EXIT_REQUEUED = 0, 1, 0


class JobFailed(RuntimeError):
    """The attempt failed for a reason the driver can name (``ended_by`` says which kind)."""

    def __init__(self, message: str, ended_by: str = "failed", requeue: bool = False):
        super().__init__(message)
        self.ended_by = ended_by
        self.requeue = requeue  # the attempt ends "requeued" and the job requeues itself


def _setup_logging(path: Path) -> None:
    """Root logging of one attempt: ``path`` (its driver.log) and stderr, every line once.

    Idempotent: the handlers of an earlier call are replaced (closed), and a plain stream handler
    to stderr/stdout already on the root logger is removed (importing verl runs
    ``logging.basicConfig``), so each line appears once in the job's output file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for old in list(root.handlers):
        console = type(old) is logging.StreamHandler and old.stream in (sys.stderr, sys.stdout)
        if console or getattr(old, "_grpokit_driver", False):
            root.removeHandler(old)
            if isinstance(old, logging.FileHandler):
                old.close()
    for handler in (logging.FileHandler(path), logging.StreamHandler(sys.stderr)):
        handler.setFormatter(fmt)
        handler._grpokit_driver = True  # type: ignore[attr-defined]
        root.addHandler(handler)


def _slurm_time_left_s() -> float | None:
    """This task's own time left (s); never a sibling's (see environment.slurm_task_id)."""
    return environment.slurm_time_left_s()


class Driver:
    """Runs one attempt of one point; see the module docstring for the outcomes."""

    def __init__(self, spec: PointSpec):
        self.spec = spec
        self.run_dir = Path(spec.run_dir)
        self.ctl = control.control_dir(self.run_dir)
        self.grace_s = float(spec.runtime.get("kill_grace_s", 15))
        self.stop_signal: int | None = None
        self.stop_at: float | None = None
        # What Slurm said when the stop signal arrived (the stop decision's inputs).
        self.time_left_at_signal: float | None = None
        self.slurm_requeues: bool | None = None
        self.slurm_preempting: bool | None = None
        self.resubmission: str | None = None
        self.cluster: ray_cluster.RayCluster | None = None
        self.sidecars: dict[str, sidecars.Sidecar] = {}
        self.trainer_proc: subprocess.Popen | None = None
        self.stacks_dir: Path | None = None  # faulthandler files of the trainer's processes (watchdog)
        self.timings: dict[str, float] = {}
        self.t0 = time.monotonic()

    # -- signals -------------------------------------------------------------------------------
    def _on_signal(self, signum, _frame) -> None:
        if self.stop_signal is not None:
            return
        self.stop_signal = signum
        name = signal.Signals(signum).name
        log.warning("%s received: asking the trainer to checkpoint at its next step boundary", name)
        control.request_save(self.ctl, reason=name)
        # USR2 comes signal_lead_s before the end; SIGTERM only KillWait/GraceTime before SIGKILL.
        budget = float(self.spec.runtime.get("save_deadline_s", 900))
        if signum != signal.SIGUSR2:
            budget = min(budget, self.grace_s * 2)
        left = self.time_left_at_signal = _slurm_time_left_s()
        view = environment.slurm_stop_view()
        self.slurm_requeues, self.slurm_preempting = view.requeueing, view.preempting
        log.info(
            "Slurm task %s: own time left %s s, Slurm preempting it: %s, requeueing it: %s",
            environment.slurm_task_id(),
            None if left is None else round(left),
            self.slurm_preempting,
            self.slurm_requeues,
        )
        if left is not None:
            budget = min(budget, max(left - self.grace_s, 5))
        self.stop_at = time.monotonic() + budget

    def _install_signals(self) -> None:
        for sig in (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    # -- the run folder --------------------------------------------------------------------------
    def _write_run_files(self, attempt_dir: Path) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "point.json").write_text(self.spec.to_json())
        write_json_atomic(self.run_dir / "env.json", environment.summary())
        ckpt = Path(self.spec.checkpoint_dir)
        ckpt.mkdir(parents=True, exist_ok=True)
        link = self.run_dir / "checkpoints"
        if ckpt != link and not link.exists():
            link.symlink_to(ckpt, target_is_directory=True)
        attempt_dir.mkdir(parents=True, exist_ok=True)

    def _target_step(self) -> int | None:
        value = self.spec.verl_value("trainer.total_training_steps")
        return int(value) if value not in (None, "null") else None

    # -- stages ------------------------------------------------------------------------------------
    def _validate(self) -> Any:
        cfg, problems = validate_point(self.spec)
        if problems:
            raise JobFailed("the point does not validate:\n" + "\n".join(map(str, problems)), "invalid")
        return cfg

    def _check_checkpoint_folder(self) -> None:
        """Refuse (``invalid``) a checkpoint folder that other nodes do not see, or one whose newest
        checkpoint was saved at another GPU count than this point trains on."""
        ckpt = Path(self.spec.checkpoint_dir)
        nodes = environment.node_names()
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

    def _start_services(self, attempt_dir: Path, base_env: dict[str, str]) -> dict[str, str]:
        nodes = environment.node_names()
        host = "127.0.0.1" if len(nodes) <= 1 else environment.node_address(nodes[0])
        fraction = self.spec.verl_value("actor_rollout_ref.rollout.gpu_memory_utilization")
        plan = gpu_plan.plan(self.spec, float(fraction) if fraction else gpu_plan.VERL_DEFAULT_ROLLOUT_FRACTION)
        visible = environment.visible_gpus() or [str(i) for i in range(plan["gpus_per_node"])]
        plan["physical"] = {
            "trainer": [visible[i] for i in plan["trainer"]["gpus"] if i < len(visible)],
            **{n: [visible[i] for i in s["gpus"] if i < len(visible)] for n, s in plan["sidecars"].items()},
        }
        write_json_atomic(self.run_dir / "gpu_plan.json", plan)

        env = dict(base_env)
        self.sidecars = sidecars.plan_sidecars(self.spec.sidecars, host=host, log_dir=attempt_dir / "sidecars")
        env.update(sidecars.client_env(self.sidecars))
        t = time.monotonic()
        for name, sc in self.sidecars.items():
            devices = plan["physical"].get(name)
            sidecars.start(sc, self.sidecars, env=env, cuda_devices=",".join(devices) if devices else None)

        trainer_gpus = plan["physical"]["trainer"]
        ray_env = dict(env)
        if environment.visible_gpus():
            ray_env["CUDA_VISIBLE_DEVICES"] = ",".join(trainer_gpus)
        ray_env.update(ray_cluster.auth_env(self.run_dir / ".secrets"))
        num_cpus = environment.cpus_for_ray(self.spec.cluster.get("cpus_per_task"))
        self.cluster = ray_cluster.start_cluster(
            log_dir=attempt_dir / "ray",
            env=ray_env,
            num_cpus=num_cpus,
            num_gpus=len(trainer_gpus),
            nodes=nodes,
            multi_node_host=host,
            timeout_s=float(self.spec.runtime.get("ray_start_timeout_s", 180)),
            stop_requested=lambda: self.stop_signal is not None,
            **ray_resources.cluster_sizes(self.spec.runtime, num_cpus),
        )
        self.timings["ray_ready_s"] = round(time.monotonic() - t, 2)
        for sc in self.sidecars.values():
            sidecars.wait_ready(sc)
        self.timings["sidecars_ready_s"] = round(time.monotonic() - t, 2)
        endpoints = {"ray": self.cluster.endpoints(), "sidecars": {n: s.endpoint() for n, s in self.sidecars.items()}}
        write_json_atomic(self.run_dir / "endpoints.json", endpoints)
        ray_env["RAY_ADDRESS"] = self.cluster.address
        return ray_env

    def _sidecar_overrides(self) -> list[str]:
        """``reward_kwargs`` that point the reward at the sidecars (``spec.reward_kwargs`` templates)."""
        out = []
        for sc in self.sidecars.values():
            for key, template in (sc.spec.get("reward_kwargs") or {}).items():
                out.append(f"+reward.custom_reward_function.reward_kwargs.{key}={template.format(url=sc.url)}")
        return out

    def _supervise_trainer(self, cmd: list[str], env: dict[str, str], attempt_dir: Path) -> int:
        log_path = attempt_dir / "trainer.log"
        self.trainer_proc = procs.start(cmd, log_path, env=env, cwd=self.run_dir)
        log.info(
            "trainer launched with Ray ready (pid %d, %.2f s after job start)",
            self.trainer_proc.pid,
            time.monotonic() - self.t0,
        )
        self.timings["trainer_launched_s"] = round(time.monotonic() - self.t0, 2)
        self.stacks_dir = Path(env[watchdog.STACKS_ENV]) if env.get(watchdog.STACKS_ENV) else None
        policy = watchdog.HangPolicy.from_runtime(self.spec.runtime)
        hang_watch = watchdog.Watchdog(policy, attempt_dir / "metrics.jsonl") if policy else None
        while True:
            rc = self.trainer_proc.poll()
            if rc is not None:
                return rc
            if self.stop_signal is not None:
                # On SIGTERM Slurm signals every process of the job: deaths are expected now.
                if self.stop_at is not None and time.monotonic() > self.stop_at:
                    log.warning("trainer did not stop in time after the save request: stopping it")
                    procs.stop_tree(self.trainer_proc.pid, self.grace_s, name="trainer")
                    return self.trainer_proc.wait()
                time.sleep(0.5)
                continue
            dead = [sc for sc in self.sidecars.values() if not sc.alive()]
            if dead:
                sc = dead[0]
                procs.stop_tree(self.trainer_proc.pid, self.grace_s, name="trainer")
                raise JobFailed(
                    f"sidecar {sc.name} died (exit {sc.proc.returncode}) while the trainer ran; "
                    f"last lines of {sc.log_path}:\n{procs.tail(sc.log_path)}",
                    "sidecar_failed",
                )
            if self.cluster is not None and not self.cluster.alive():
                procs.stop_tree(self.trainer_proc.pid, self.grace_s, name="trainer")
                raise JobFailed("the job's Ray cluster died while the trainer ran; see attempts/*/ray/", "ray_failed")
            if hang_watch is not None and (hang := hang_watch.poll()) is not None:
                self._stop_hung_trainer(hang, attempt_dir)
            time.sleep(0.5)

    def _stop_hung_trainer(self, hang: watchdog.Hang, attempt_dir: Path) -> None:
        """Dump the stacks of the hung trainer's processes, stop it, raise ``hung`` (requeued within
        the time-out budget ``runtime.max_timeout_requeues``, which hangs share, else failed)."""
        log.error("trainer hung: %s; dumping stacks", hang.describe())
        stacks = attempt_dir / watchdog.STACKS_FILE
        remote = []
        if self.cluster is not None:
            remote = [
                (n, watchdog.remote_dump_command(n, self.cluster.address, self.stacks_dir))
                for n in self.cluster.nodes[1:]
            ]
        try:
            local = watchdog.local_targets(self.trainer_proc.pid, self.cluster.head.pid if self.cluster else None)
            size = watchdog.write_stacks_file(stacks, hang, local, self.stacks_dir, remote)
            where = f"stacks of {len(local)} process(es) here, {len(remote)} other node(s) in {stacks} ({size} bytes)"
        except Exception as exc:  # the stop must happen whatever the dump did
            log.exception("stack dump failed")
            where = f"no stacks ({type(exc).__name__}: {exc})"
        procs.stop_tree(self.trainer_proc.pid, self.grace_s, name="trainer")
        status = StatusFile(self.run_dir).data  # counted as _interrupted_outcome counts time-outs
        since = status.get("resubmission")
        used = sum(
            1
            for a in status["attempts"][:-1]
            if a.get("ended_by") in ("timeout", "hung") and a.get("resubmission") == since
        )
        allowed = int(self.spec.runtime.get("max_timeout_requeues", 3))
        requeue = environment.in_slurm() and used < allowed
        then = (
            f"requeued ({used + 1} of runtime.max_timeout_requeues={allowed} time-out/hang requeues)"
            if requeue
            else f"not requeued (runtime.max_timeout_requeues={allowed} spent)"
            if environment.in_slurm()
            else "run the same command again to resume"
        )
        raise JobFailed(f"trainer hung: {hang.describe()}; {where}; trainer stopped, {then}", "hung", requeue)

    # -- outcome -----------------------------------------------------------------------------------
    def _interrupted_outcome(self, status: StatusFile) -> tuple[str, str, bool]:
        """(state, ended_by, requeue) after a stop signal (:func:`stop_decision.decide`).

        Classified from what Slurm said when the signal arrived (this task's own time left), not
        after the save, which may take most of the lead. Time-outs count since the point's last
        explicit resubmission.
        """
        since = status.data.get("resubmission")
        timeouts = sum(  # hangs (watchdog) share the time-out budget
            1
            for a in status.data["attempts"][:-1]
            if a.get("ended_by") in ("timeout", "hung") and a.get("resubmission") == since
        )
        decision = stop_decision.decide(
            self.stop_signal,
            time_left_s=self.time_left_at_signal,
            lead_s=float(self.spec.cluster.get("signal_lead_s", 600)),
            timeouts_so_far=timeouts,
            max_timeout_requeues=int(self.spec.runtime.get("max_timeout_requeues", 3)),
            in_slurm=environment.in_slurm(),
            slurm_requeues=self.slurm_requeues,
            slurm_preempting=self.slurm_preempting,
        )
        log.info("stop decision: %s (%s)", decision.state, decision.why)
        return decision.state, decision.ended_by, decision.requeue

    def run(self) -> int:
        """Run one attempt; returns the process exit code."""
        status = StatusFile(self.run_dir)
        # A point in a final state runs again only on an explicit resubmission (resubmission.py);
        # a requeue of its job by anyone else leaves the run folder untouched.
        taken = resubmission.pending(self.run_dir, status.data)
        if status.data.get("state") in FINAL_STATES and taken is None:
            print(
                f"point {self.spec.name} is already {status.data['state']} ({status.path}): nothing to do, "
                f"nothing changed. To run it again: python launch/resubmit.py {self.run_dir.parent}",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_OK
        self.resubmission = taken or status.data.get("resubmission")
        attempt = status.attempt + 1
        attempt_dir = self.run_dir / "attempts" / str(attempt)
        self._write_run_files(attempt_dir)
        _setup_logging(attempt_dir / "driver.log")
        procs.become_subreaper()
        self._install_signals()
        if environment.in_slurm() and os.environ.get("SLURMD_NODENAME"):
            # scancel --signal=USR2 without --batch signals job steps only, never this batch step
            signal_relay.start(os.environ["SLURMD_NODENAME"], attempt_dir / "signal_relay.log")
        control.reset(self.ctl)
        status.start_attempt(target_step=self._target_step(), slurm=environment.slurm_info())
        if self.resubmission is not None:
            status.data["resubmission"] = self.resubmission
            status.update_attempt(resubmission=self.resubmission)
        log.info("point %s, attempt %d, run folder %s", self.spec.name, attempt, self.run_dir)
        state, ended_by, reason, exit_code, requeue = "failed", "failed", "", None, False
        judged_target: int | None = None
        try:
            # verl's own check of the point (importing verl takes seconds) runs while Ray and the
            # sidecars come up; the trainer starts only once it passed.
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="validate")
            try:
                validation = pool.submit(self._validate)
                self._check_checkpoint_folder()  # before anything in it is changed
                keep = self.spec.verl_value("trainer.max_actor_ckpt_to_keep")
                resume = prepare_resume(
                    Path(self.spec.checkpoint_dir), keep=int(keep) if keep not in (None, "null") else None
                )
                status.update_attempt(resume_step=resume["resume_step"])
                env = {
                    **os.environ,
                    **{k: str(v) for k, v in (self.spec.runtime.get("env") or {}).items()},
                    **trainer.environment(self.run_dir, attempt_dir),
                    **trackers.environment(self.spec),  # W&B: one run per point across attempts
                }
                try:
                    env = self._start_services(attempt_dir, env)
                finally:
                    if self.stop_signal is None:
                        validation.result()  # a validation failure wins over a start-up error
            finally:
                # After a stop signal only Slurm's KillWait is left: the check is not waited for
                # (the trainer will not start in this attempt).
                pool.shutdown(wait=self.stop_signal is None)
            cmd = trainer.command(self.spec, self._sidecar_overrides())
            trainer.write_command_file(
                self.run_dir / "verl_cmd.sh", cmd, list(trainer.environment(self.run_dir, attempt_dir))
            )
            if self.stop_signal is not None:
                state, ended_by, requeue = self._interrupted_outcome(status)
                reason = "stopped before the trainer started"
            elif self.spec.runtime.get("needs_gpu", True) and not environment.cuda_available():
                state = ended_by = "skipped_no_gpu"
                reason = (
                    "no CUDA GPU on this node: Ray, the sidecars and verl's config check ran; training was "
                    f"skipped. The trainer command is in {self.run_dir / 'verl_cmd.sh'}"
                )
                exit_code = 0
            else:
                exit_code = self._supervise_trainer(cmd, env, attempt_dir)
                saved = control.saved_marker(self.ctl)
                done = None
                if exit_code == 0:
                    # completed = target step reached with a final checkpoint (runtime/completion.py)
                    done = completion.judge_attempt(self.spec, attempt_dir, _last_step(attempt_dir / "metrics.jsonl"))
                if done is not None:
                    # The trainer ended by itself (a save request makes it exit non-zero): its own
                    # outcome stands even when a warning came meanwhile, e.g. the target reached.
                    state, ended_by, reason, judged_target = done.state, done.ended_by, done.reason, done.target_step
                elif self.stop_signal is not None:
                    state, ended_by, requeue = self._interrupted_outcome(status)
                    reason = (
                        f"checkpointed step {saved['step']} on {signal.Signals(self.stop_signal).name}"
                        if saved
                        else f"stopped on {signal.Signals(self.stop_signal).name} without a new "
                        "checkpoint (resumes from the last one)"
                    )
                else:
                    # The first traceback's error names the cause (a dead rollout engine's own
                    # error, not verl's later replay-buffer message); the tail follows it.
                    cause = first_error_in_file(attempt_dir / "trainer.log")
                    reason = (
                        f"trainer exited with {exit_code}"
                        + (f"; first error in trainer.log: {cause}" if cause else "")
                        + f"; last lines of trainer.log:\n{procs.tail(attempt_dir / 'trainer.log')}"
                    )
        except JobFailed as exc:
            ended_by, reason = exc.ended_by, str(exc)
            if exc.requeue:
                state, requeue = "requeued", True
            log.error("%s", exc)
        except (sidecars.SidecarError, ray_cluster.RayStartError) as exc:
            if self.stop_signal is not None:
                # Slurm signals every process of the job (scancel, preemption): Ray or a sidecar
                # dying now is the stop, not a start-up failure.
                state, ended_by, requeue = self._interrupted_outcome(status)
                reason = f"stopped on {signal.Signals(self.stop_signal).name} while Ray and the sidecars were starting"
                log.warning("%s (%s)", reason, str(exc).splitlines()[0])
            else:
                ended_by = "sidecar_failed" if isinstance(exc, sidecars.SidecarError) else "ray_failed"
                reason = str(exc)
                log.error("%s", exc)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            log.exception("driver error")
        finally:
            self._teardown()
        last_step = _last_step(attempt_dir / "metrics.jsonl")
        if judged_target is not None and status.data.get("target_step") is None:
            status.data["target_step"] = judged_target  # verl's own count, when the point leaves it to verl
        try:
            write_merged(self.run_dir)
        except Exception:  # merged metrics are a convenience; never lose the status over them
            log.exception("could not merge metrics")
        status.finish(
            state,
            ended_by=ended_by,
            reason=reason,
            exit_code=exit_code,
            last_step=last_step,
            timings=self.timings,
            slurm_state="REQUEUED" if requeue else None,
        )
        if environment.in_slurm():
            # The outcome is written: a late warning or SIGTERM (the time limit's, the job's end)
            # must neither start a new stop nor kill this process with a signal exit status,
            # which Slurm would record as the job's failure.
            for late in (signal.SIGUSR2, signal.SIGTERM):
                signal.signal(late, signal.SIG_IGN)
        log.info("point %s: %s (%s) %s", self.spec.name, state, ended_by, reason.splitlines()[0] if reason else "")
        if requeue:
            _requeue_self()
            return EXIT_REQUEUED
        if state == "requeued":
            # Outside Slurm nothing requeues the point: the same command (or resubmit.py) resumes it.
            log.info("checkpointed and stopped; run the same command again to resume")
            return EXIT_REQUEUED
        return EXIT_OK if state in ("completed", "skipped_no_gpu") else EXIT_FAILED

    def _teardown(self) -> None:
        if self.stacks_dir is not None:
            watchdog.tidy_stacks_dir(self.stacks_dir)
        if self.trainer_proc is not None:
            procs.stop_tree(self.trainer_proc.pid, self.grace_s, name="trainer")
        sidecars.stop(self.sidecars, self.grace_s)
        if self.cluster is not None:
            self.cluster.stop(self.grace_s)
        procs.stop_all_children(self.grace_s)
        release_ports()


def _last_step(metrics_path: Path) -> int | None:
    steps = [r.get("step") for r in read_jsonl(metrics_path)] if metrics_path.exists() else []
    steps = [s for s in steps if isinstance(s, int)]
    return max(steps) if steps else None


def _requeue_self() -> None:
    """``scontrol requeue <own task id>``: this task (never its array) goes back to the queue with
    the same id and run folder."""
    job = environment.slurm_task_id()
    log.info("requeueing job %s", job)
    for handler_sig in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(handler_sig, signal.SIG_IGN)  # Slurm signals the job while requeueing it
    out = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if out.returncode != 0:
        log.error("scontrol requeue %s failed: %s", job, out.stderr.strip())


def run_point(spec: PointSpec | dict | str) -> int:
    """Run one attempt of a point (a :class:`PointSpec`, its dict, or its JSON) in this process."""
    if isinstance(spec, str):
        spec = PointSpec.from_json(spec)
    elif isinstance(spec, dict):
        spec = PointSpec(**spec)
    return Driver(spec).run()


def main() -> None:
    """``python -m grpokit.runtime.driver <point.json>``: run a point whose spec is in a file."""
    spec = PointSpec.from_json(Path(sys.argv[1]).read_text())
    sys.exit(run_point(spec))


if __name__ == "__main__":
    main()
