"""The lifecycle of one inference worker process (the command line is ``_cli``'s).

Order at start: die-with-parent hooks, bind the port (so ``/health`` answers
``loading`` at once), emit ``instance_loading``, load on the inference
thread, emit ``instance_ready``. States change only through the table in
``_lifecycle``; the engine is whichever ``_engine_setup`` chose, driven through
its protocol (:class:`workers.inference.engine.Engine`).

Stop requests come from a signal handler, the stdin thread or the engine
thread, so they are plain attributes plus a wake-up pipe for the main thread
(no locks or Events inside a handler).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TypedDict

from service.core import events as ev
from service.core import worker_key
from workers.inference._cli import (
    EXIT_ERROR,
    EXIT_LOAD_FAILED,
    EXIT_OK,
    EXIT_ORPHANED,
    WorkerArgs,
    front_options,
    parse_args,
)
from workers.inference._engine_setup import build_engine, load
from workers.inference._lifecycle import Trigger, WorkerState, next_state
from workers.inference.engine import SAVE_BOUND_S, BatchEngine, EngineMonitor, EngineStats
from workers.inference.http import (
    InferenceApp,
    bind_server,
    json_object,
    load_sampling_defaults,
    model_info,
)
from workers.inference.llama import LlamaLog, Loaded, LoadError
from workers.runtime import INFERENCE_WORKER, Parent, Wakeup, WorkerRuntime

PROGRESS_INTERVAL_S = 0.2


class LoadFacts(TypedDict):
    """What ``instance_ready`` (the event and its log line) says of the load, beside llama-server's meta."""

    load_ms: float
    n_ctx: int
    n_params: int
    file_size: int
    architecture: str


class Worker:
    """Lifecycle of one inference process; see the module docstring."""

    def __init__(
        self, args: WorkerArgs, runtime: WorkerRuntime, early_signals: Sequence[int] = (), key: str | None = None
    ) -> None:
        self.args = args
        self._key = key  # the service's secret: every request must carry it (service.core.worker_key)
        # Stop signals taken before run() installs the handlers: still growing until then, so read there.
        self._early_signals = early_signals
        self.runtime = runtime
        self.log = log = runtime.log
        self.pid = os.getpid()
        # a line per finished request; llama-server's debug lines as llama.cpp's (the console's -v)
        self.engine = build_engine(
            args,
            on_finished=log.info,
            on_debug=lambda text: log.info("llama_cpp", text=text),
            on_event=self.emit,
            log=log.info,
        )
        front = front_options(args, os.environ)
        self.app = InferenceApp(model_name=args.alias, engine=self.engine, log=log, front_options=front)
        self.endpoint = ""
        self._state_lock = threading.Lock()  # held to record an event together with the change it reports
        self._state = WorkerState.LOADING
        # Written from signal handlers, so: plain attributes + a wake-up pipe
        # for the main thread (no locks or Events inside a handler); every
        # signal also writes to it, so none is lost before the main thread waits.
        self._stop_reason: str | None = None
        self._stop_code = EXIT_OK
        self._stop_grace = args.stop_timeout
        self._stdin_reason: str | None = None
        self._load_failed: LoadError | None = None
        self._wakeup = Wakeup()
        self._last_progress = 0.0
        self._progress_done = False
        self._llama_log = LlamaLog(lambda level, text: getattr(self.log, level)("llama_cpp", text=text))

    def emit(self, event: ev.Event) -> None:
        try:
            self.runtime.emit(event)
        except Exception as exc:  # a sink failure must not kill serving
            self.log.error("event_emit_failed", type=event.TYPE, error=repr(exc))

    def _wake(self) -> None:
        self._wakeup.wake()

    def _advance(self, trigger: Trigger) -> bool:
        """Take the lifecycle's ``trigger`` edge (under ``_state_lock``); False: refused, the state stays."""
        after = next_state(self._state, trigger)
        if after is None:
            return False
        self._state = after
        return True

    # -- stop requests (any thread, or a signal handler) --------------------

    def request_stop(self, reason: str, code: int, grace: float) -> None:
        if self._stop_reason is None:
            self._stop_reason, self._stop_code, self._stop_grace = reason, code, grace
        else:
            self._stop_grace = 0.0
            self.engine.cancel_running()  # asked twice: end the running request now
        self._wake()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.runtime.parent.gone():
            self.request_stop("parent_died", EXIT_ORPHANED, 0.0)
        else:
            self.request_stop(self._stdin_reason or "signal", EXIT_OK, self.args.stop_timeout)

    def _on_stop_command(self, reason: str) -> None:
        self._stdin_reason = reason or "requested"
        self.request_stop(self._stdin_reason, EXIT_OK, self.args.stop_timeout)

    def _on_stdin_eof(self) -> None:
        self.request_stop("parent_died", EXIT_ORPHANED, 0.0)

    def _parent_gone_within(self, timeout: float) -> bool:
        """Whether the service died (stdin EOF or reparenting) within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            if self.runtime.parent.gone():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    # -- loading (inference thread) -----------------------------------------

    def _on_progress(self, progress: float) -> bool:
        now = time.monotonic()
        final = progress >= 1.0
        # Throttled to one event per PROGRESS_INTERVAL_S, plus exactly one final 1.0.
        if not self._progress_done and (final or now - self._last_progress >= PROGRESS_INTERVAL_S):
            self._last_progress, self._progress_done = now, final
            self.emit(ev.LoadingProgress(instance_id=self.args.instance_id, progress=round(min(progress, 1.0), 4)))
        return self._stop_reason is None  # False aborts llama.cpp's load

    def _bind(self) -> tuple[Any, str]:
        """Bind the port the service picked; if another process took it since (the
        service only saw it free a moment ago), take any free one: the service learns
        the real endpoint from ``instance_loading``, so a lost race costs nothing."""
        a = self.args
        try:
            return bind_server(self.app, host=a.host, port=a.port, key=self._key)
        except OSError as exc:
            if a.port == 0 or exc.errno != errno.EADDRINUSE:
                raise
            self.log.warning("port_taken", port=a.port)
            return bind_server(self.app, host=a.host, port=0, key=self._key)

    def _load(self) -> Loaded:
        try:  # --grammar-file / --json-schema-file are read now: a bad one fails the load, as llama-server's start
            defaults = load_sampling_defaults(self.args.sampling)
            self.app.front_options = dataclasses.replace(self.app.front_options, sampling_defaults=defaults)
        except (OSError, ValueError) as exc:
            raise LoadError("bad_sampling_default", f"sampling defaults: {exc}") from None
        save_dir = self.args.slot_save_path
        if save_dir and not os.path.isdir(save_dir):  # llama-server refuses it at start (common/arg.cpp)
            raise LoadError("load_error", f"--slot-save-path: not a directory: {save_dir}")
        return load(self.args, self._llama_log, self._on_progress)

    def _on_loaded(self, loaded: Loaded) -> bool:
        meta: LoadFacts = {
            "load_ms": loaded.load_ms,
            "n_ctx": loaded.n_ctx,
            "n_params": loaded.n_params,
            "file_size": loaded.file_size,
            "architecture": loaded.architecture,
        }
        # Emitted under the state lock so a concurrent stop cannot record
        # instance_stopped before instance_ready.
        with self._state_lock:
            if not self._advance("loaded"):  # LOADING -> READY; refused once a stop began
                return False
            info = model_info(loaded.llm)  # llama-server's meta first, then ours
            self.app.model_meta = {
                **info,
                **json_object(meta),
                "engine": self.args.engine,
                "n_parallel": self.engine.slot_count,
            }
            self.app.status = WorkerState.READY
            self.emit(
                ev.InstanceReady(
                    instance_id=self.args.instance_id,
                    pid=self.pid,
                    endpoint=self.endpoint,
                    model_info=info,
                    log_path=self.args.log_path,
                    offload=loaded.offload.to_json(),
                    **meta,
                )
            )
        # What llama.cpp was given (docs/operations.md "Where a model runs"): one line, before instance_ready's.
        self.log.info("llama_params", **loaded.used)
        self.log.info("instance_ready", endpoint=self.endpoint, phases=loaded.phases, **meta)
        monitor = self.engine.monitor
        if monitor is not None and self.args.stats_interval > 0:
            threading.Thread(target=self._report_stats, args=(monitor,), name="stats", daemon=True).start()
        return True

    def _report_stats(self, monitor: EngineMonitor) -> None:
        """``instance_stats`` whenever the engine's load changed, at most every ``--stats-interval`` s
        (so an idle model appends nothing, a busy one a few events a minute)."""
        interval = self.args.stats_interval
        last: EngineStats | None = None
        last_at = -interval
        while True:
            time.sleep(min(interval, 1.0))
            stats = monitor.stats()
            if stats == last or time.monotonic() - last_at < interval:
                continue
            with self._state_lock:  # never after instance_stopped
                if self._state is not WorkerState.READY:
                    return
                self.emit(ev.InstanceStats(instance_id=self.args.instance_id, **stats))
            last, last_at = stats, time.monotonic()

    def _on_load_failed(self, exc: BaseException) -> None:
        err = exc if isinstance(exc, LoadError) else LoadError("load_error", f"{type(exc).__name__}: {exc}")
        with self._state_lock:
            if not self._advance("load_failed"):  # LOADING -> FAILED; refused once a stop began
                return
        self.app.status = WorkerState.FAILED
        self._load_failed = err
        self._wake()

    # -- main thread ----------------------------------------------------------

    def _serve(self) -> Any:
        """Bind and serve HTTP (``/health`` answers ``loading`` at once); None: the port could not be
        bound (``instance_load_failed`` recorded)."""
        try:
            server, self.endpoint = self._bind()
        except OSError as exc:
            self.emit(
                ev.InstanceLoadFailed(
                    instance_id=self.args.instance_id, reason="port_unavailable", message=f"cannot bind: {exc}"
                )
            )
            self.log.error("bind_failed", error=str(exc))
            return None
        # poll_interval only bounds how late a shutdown() is noticed, and the worker never calls it (it exits
        # instead): a long one keeps an idle worker from waking ten times a second.
        serve = {"poll_interval": 5.0}
        threading.Thread(target=server.serve_forever, kwargs=serve, name="http", daemon=True).start()
        return server

    def _loading_params(self) -> dict[str, ev.JSON]:
        """``instance_loading``'s ``params``: what this worker runs with."""
        a = self.args
        return {
            "model_path": a.model_path,
            "model_name": a.model_name,
            "n_ctx": a.n_ctx,
            "n_threads": a.threads,
            "n_threads_batch": a.threads_batch,
            "n_batch": a.n_batch,
            "n_parallel": a.n_parallel if a.engine == "batch" else 1,
            "engine": a.engine,
            "embedding": bool(a.embedding),
            "chat_format": a.chat_format,
            "seed": a.seed,
        }

    def run(self) -> int:
        a = self.args
        if not self.runtime.parent.die_with(signal.SIGTERM):
            self.log.error("parent_already_gone")
            return EXIT_ORPHANED
        self._wakeup.install()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        for early in self._early_signals:
            self._on_signal(early, None)
        self.runtime.control({"stop": self._on_stop_command}, on_eof=self._on_stdin_eof)
        server = self._serve()
        if server is None:
            return EXIT_LOAD_FAILED
        params = self._loading_params()
        self.emit(
            ev.InstanceLoading(
                instance_id=a.instance_id,
                pid=self.pid,
                endpoint=self.endpoint,
                params=params,
                pid_started_at=self.runtime.started_at,
            )
        )
        self.log.info("instance_loading", endpoint=self.endpoint, params=params)
        if a.engine == "legacy":
            import llama_cpp.llama  # noqa: F401 - must precede LlamaLog.install (it sets its own callback)

        self._llama_log.install()
        self.engine.start(self._load, self._on_loaded, self._on_load_failed, self.app.make_front)
        while self._stop_reason is None and self._load_failed is None:
            self._wakeup.wait()  # woken by signals, stdin, load failure
        # A real load failure wins over a concurrent stop; a load we aborted does not.
        if self._load_failed is not None and self._load_failed.reason != "aborted":
            err = self._load_failed
            self.emit(ev.InstanceLoadFailed(instance_id=a.instance_id, reason=err.reason, message=err.message))
            self.log.error("instance_load_failed", reason=err.reason, message=err.message)
            return EXIT_LOAD_FAILED
        return self._stop(server)

    def _stop(self, server: Any) -> int:
        reason, code = self._stop_reason or "signal", self._stop_code
        _hard_exit_after(self._stop_grace + 5.0 + SAVE_BOUND_S, code)  # never hang on the way out
        with self._state_lock:
            was = self._state
            self._advance("stop")  # LOADING | READY | FAILED -> STOPPING
        self.app.status = WorkerState.STOPPING
        self.log.info("stopping", reason=reason, state=was.value)
        if was is WorkerState.READY:
            threading.Thread(target=server.shutdown, daemon=True).start()
            self.engine.drain(self._stop_grace)
            self.app.wait_responses(1.0)
        # While loading there is nothing to finish: llama.cpp's load is
        # abandoned with the process (the kernel unmaps the file).
        if reason == "signal" and self._parent_gone_within(0.5):
            # PDEATHSIG fires when the *thread* that forked us dies; during a
            # SIGKILL of the service that can be before we are reparented, so
            # getppid() in the handler still named the dying service.
            reason, code = "parent_died", EXIT_ORPHANED
        if reason == "parent_died":
            # The service's recovery records instance_lost: a dead service
            # cannot have asked for this stop, so we record nothing.
            self.log.info("parent_died", exit_code=code)
            return code
        if was is WorkerState.READY and isinstance(self.engine, BatchEngine):
            self.engine.persist()  # a planned stop: the prompt cache goes to disk (--prompt-cache-dir)
        self.emit(ev.InstanceStopped(instance_id=self.args.instance_id, reason=reason, exit_code=code))
        self.log.info("instance_stopped", reason=reason, exit_code=code)
        return code


def _hard_exit_after(seconds: float, code: int) -> None:
    def bomb() -> None:
        time.sleep(seconds)
        os._exit(code)

    threading.Thread(target=bomb, name="exit-deadline", daemon=True).start()


def main(argv: list[str] | None = None, *, early_signals: Sequence[int] = ()) -> int:
    """Run the worker to its end and exit the process (``os._exit``) with its code.

    ``early_signals``: SIGTERM/SIGINT received before the worker's handlers were
    installed (``__main__`` records them during the imports); replayed as stops."""
    key = worker_key.take(os.environ)  # first: nothing this process starts (ffmpeg...) inherits it
    args = parse_args(argv)
    runtime = WorkerRuntime.open(
        INFERENCE_WORKER,
        model=args.model_name,
        owner_id=args.instance_id,
        db=args.database_url or args.db,
        events=args.events,
        parent=Parent(args.parent_pid or os.getppid()),
        log_level=args.log_level,
        private_stdout=True,  # llama-cpp-python points fd 1 at /dev/null while it loads
    )
    if key is None:
        runtime.log.warning("worker_open", message=worker_key.OPEN_WARNING)
    code = EXIT_ERROR
    try:
        code = Worker(args, runtime, early_signals, key).run()
    except Exception:  # logged; exit code 1 tells the supervisor
        runtime.log.exception("worker_crashed")
    finally:
        runtime.close()
    sys.stderr.flush()
    sys.stdout.flush()
    # os._exit: skip interpreter teardown, which could run llama.cpp destructors
    # while daemon threads (HTTP handlers, the inference thread) still use them.
    os._exit(code)
