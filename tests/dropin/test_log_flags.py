"""llama-server's log flags as llama-server means them: ``--log-file``, ``--log-disable``, ``--log-jsonl``,
``-lv``/``-v``, ``--log-colors``, ``--log-prefix``, ``--log-timestamps`` (docs/llama-cpp-compat.md).

The parsing through the real ``serve`` parser; the formats through ``configure_logging`` in a
child Python (loggers are configured once per process); ``--log-file`` and ``-lv 4`` through
a real service loading a real worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from devtools.service_process import ServiceProcess
from service.cli import LOG_LEVELS, build_parser, serve_settings
from service.llamacpp.command_line import normalize_argv
from service.llamacpp.router_args import UsageError
from service.settings import Settings
from tests.eventually import eventually
from tests.service_probes import wait_for_event

ROOT = Path(__file__).resolve().parents[2]


def _settings(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    args = build_parser().parse_args(normalize_argv(["serve", *argv]))
    return serve_settings(args, {"HOME": "/home/u", **(environ or {})})[0]


def test_the_flags_and_their_variables_set_the_service(tmp_path: Path) -> None:
    s = _settings(["--log-file", str(tmp_path / "x.log"), "--log-colors", "off", "--log-prefix", "--no-log-timestamps"])
    assert (s.log_file, s.log_colors, s.log_prefix, s.log_timestamps) == (tmp_path / "x.log", "off", True, False)
    env = {"LLAMA_ARG_LOG_FILE": "/tmp/y.log", "LLAMA_ARG_LOG_COLORS": "on", "LLAMA_ARG_LOG_TIMESTAMPS": "1"}
    s = _settings([], env)
    assert (s.log_file, s.log_colors, s.log_timestamps, s.log_prefix) == (Path("/tmp/y.log"), "on", True, None)
    assert _settings(["-lv", "4"]).log_level == "debug" and _settings(["-lv", "3"]).log_level == "info"
    assert _settings(["--log-disable"]).log_level == "off" and _settings(["--log-jsonl"]).log_json is True
    with pytest.raises(UsageError, match="unknown value for --log-colors: 'purple'"):
        _settings(["--log-colors", "purple"])


def test_the_workers_log_limits_come_from_modelrouter_variables() -> None:
    """Rotation size, backups and the budget across workers (docs/operations.md, workers' logs)."""
    default = _settings([])
    assert (default.worker_log_max_bytes, default.worker_log_backups, default.worker_log_budget_bytes) == (
        10 * 1024 * 1024,
        3,
        256 * 1024 * 1024,
    )
    env = {
        "MODELROUTER_WORKER_LOG_MAX_BYTES": "1000",
        "MODELROUTER_WORKER_LOG_BACKUPS": "1",
        "MODELROUTER_WORKER_LOG_BUDGET_BYTES": "5000",
        "MODELROUTER_WORKER_LOG_MAX_PENDING": "7",
    }
    s = _settings([], env)
    assert (s.worker_log_max_bytes, s.worker_log_backups, s.worker_log_budget_bytes) == (1000, 1, 5000)
    assert (default.worker_log_max_pending, s.worker_log_max_pending) == (10_000, 7)
    with pytest.raises(ValueError, match="worker_log_max_pending must be >= 1"):
        Settings(worker_log_max_pending=0)


def _lines(tmp_path: Path, **options: object) -> tuple[str, str]:
    """What an info line and an error line look like on stderr and in ``--log-file`` with these options."""
    log_file = tmp_path / "service.log"
    script = textwrap.dedent(f"""
        import structlog
        from pathlib import Path
        from service.outside.logging_config import configure_logging
        configure_logging(file=Path({str(log_file)!r}), **{options!r})
        structlog.get_logger("t").info("hello_there", answer=42)
        structlog.get_logger("t").error("an_error_too")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    return done.stderr, log_file.read_text()


def test_prefix_timestamps_and_colours_shape_console_lines(tmp_path: Path) -> None:
    plain, in_file = _lines(tmp_path, json=False, colors="off", prefix=False, timestamps=False)
    assert plain.strip().startswith("hello_there") and "answer=42" in plain and "info" not in plain
    assert in_file == plain  # --log-file: the same line, without colours
    shown, _ = _lines(tmp_path, json=False, colors="off", prefix=True, timestamps=True)
    assert "[info" in shown and shown[:4].isdigit()  # the level and an ISO time
    coloured, in_file = _lines(tmp_path, json=False, colors="on")
    assert "\x1b[" in coloured and "\x1b[" not in in_file.split("\n")[-2]


def test_off_the_level_of_log_disable_silences_errors_too(tmp_path: Path) -> None:
    on_console, in_file = _lines(tmp_path, json=False, level=LOG_LEVELS[_settings(["--log-disable"]).log_level])
    assert (on_console, in_file) == ("", "")
    on_console, _ = _lines(tmp_path, json=False, level=LOG_LEVELS[_settings(["-lv", "0"]).log_level])
    assert "an_error_too" in on_console and "hello_there" not in on_console  # errors only: not off


def test_jsonl_lines_carry_level_and_time_whatever_the_prefix(tmp_path: Path) -> None:
    lines, in_file = _lines(tmp_path, json=True, prefix=False, timestamps=False)
    record = json.loads(lines.splitlines()[0])
    assert record["event"] == "hello_there" and record["level"] == "info" and "timestamp" in record
    assert json.loads(in_file.splitlines()[0]) == record


@pytest.mark.timeout(90)
def test_log_disable_silences_the_console_and_the_log_file_as_llama_server_does(
    tmp_path: Path, models_dir: Path
) -> None:
    log_file = tmp_path / "llama.log"
    env = {"MODELROUTER_MODELS_DIR": str(models_dir)}
    with ServiceProcess(tmp_path / "home", env=env, args=["--log-disable", "--log-file", str(log_file)]) as svc:
        name = sorted(p.stem for p in models_dir.glob("*.gguf"))[0]
        assert httpx.post(f"{svc.url}/models/load", json={"model": name}, timeout=10).status_code == 200
        wait_for_event(svc, "instance_ready", model=name)
        assert httpx.get(f"{svc.url}/models/{name}/logs", timeout=10).status_code == 200  # its own file still
        console = svc.log_text()
    assert log_file.read_text() == "", "nothing in --log-file"
    assert "service_ready" not in console and "[inference:" not in console, console[-2000:]


@pytest.mark.timeout(90)
def test_log_file_holds_the_service_log_and_the_forwarded_load_log_at_lv_4(tmp_path: Path, models_dir: Path) -> None:
    """``--log-file`` with ``-lv 4``: the service's own lines and each worker's, llama.cpp's load log
    included, with the worker's prefix; a missing directory is an error at start-up."""
    log_file = tmp_path / "llama.log"
    env = {"MODELROUTER_MODELS_DIR": str(models_dir)}
    with ServiceProcess(tmp_path / "home", env=env, args=["--log-file", str(log_file), "-lv", "4"]) as svc:
        name = sorted(p.stem for p in models_dir.glob("*.gguf"))[0]
        assert httpx.post(f"{svc.url}/models/load", json={"model": name}, timeout=10).status_code == 200
        instance = wait_for_event(svc, "instance_ready", model=name)["data"]["instance_id"]
        prefix = f"[inference:{name}:{instance}] "

        def forwarded() -> list[str]:
            events = [json.loads(ln).get("event", "") for ln in log_file.read_text().splitlines() if ln.startswith("{")]
            return [e for e in events if e.startswith(prefix) and "print_info" in e]

        eventually(forwarded, "the load log forwarded into --log-file")
        assert '"service_ready"' in log_file.read_text()
    missing = ServiceProcess(tmp_path / "home2", env=env, args=["--log-file", str(tmp_path / "no" / "x.log")])
    with pytest.raises(RuntimeError, match="error: --log-file"):
        missing.start()


def _console_events(svc: ServiceProcess) -> list[str]:
    """The ``event`` of each JSON line the service printed (a forwarded worker line is one)."""
    found = []
    for line in svc.log_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            found.append(str(record.get("event", "")) if isinstance(record, dict) else "")
    return found


@pytest.mark.timeout(90)
def test_single_model_mode_prints_its_models_lines_bare_as_llama_server(tmp_path: Path, models_dir: Path) -> None:
    """``-m FILE -v``: llama.cpp's load log and the worker's own lines (a request's ``request_finished``)
    on the console as llama-server prints its one model's, with no worker prefix; the router (above)
    prefixes each child's lines as llama.cpp's router does."""
    path = models_dir / "tiny-a.gguf"
    with ServiceProcess(tmp_path / "home", args=["-m", str(path), "-v"]) as svc:
        wait_for_event(svc, "instance_ready", model="tiny-a", timeout=60)
        loaded = eventually(lambda: [e for e in _console_events(svc) if e.startswith("print_info: ")], "the load log")
        assert len(loaded) > 5
        body = {"prompt": "once upon", "max_tokens": 2}
        assert httpx.post(f"{svc.url}/v1/completions", json=body, timeout=60).status_code == 200
        finished = eventually(
            lambda: [e for e in _console_events(svc) if e.startswith("{") and '"request_finished"' in e],
            "the request's line, bare",
        )
        assert json.loads(finished[0])["event"] == "request_finished"
        assert not [e for e in _console_events(svc) if e.startswith("[inference:")]


@pytest.mark.timeout(90)
def test_log_prompts_dir_writes_each_prompt_as_llama_server(tmp_path: Path, models_dir: Path) -> None:
    """``--log-prompts-dir``: a completion's prompt as given, a chat's rendered prompt (its template
    applied), each in ``<dir>/<12-digit ms>.txt``; the directory is created."""
    prompts = tmp_path / "prompts" / "deeper"
    env = {"MODELROUTER_MODELS_DIR": str(models_dir)}
    with ServiceProcess(tmp_path / "home", env=env, args=["--log-prompts-dir", str(prompts)]) as svc:
        body = {"model": "tiny-a", "prompt": "once upon a time", "max_tokens": 2}
        assert httpx.post(f"{svc.url}/v1/completions", json=body, timeout=60).status_code == 200
        files = eventually(lambda: sorted(prompts.glob("*.txt")) if prompts.is_dir() else None, "a prompt file")
        assert [f.read_text() for f in files] == ["once upon a time"]
        assert all(len(f.stem) == 12 and f.stem.isdigit() for f in files)
        chat = {"model": "tiny-a", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2}
        assert httpx.post(f"{svc.url}/v1/chat/completions", json=chat, timeout=60).status_code == 200
        rendered = eventually(lambda: [f for f in prompts.glob("*.txt") if f not in files], "the chat's prompt file")
        text = rendered[0].read_text()
        assert "hello there" in text and text != "hello there"  # the template's markup around the message


@pytest.mark.parametrize(
    ("argv", "environ", "verbose"),
    [
        (["-v"], {}, True),
        (["--verbose"], {}, True),
        (["--log-verbose"], {}, True),
        (["-lv", "10"], {}, True),
        ([], {"LLAMA_ARG_LOG_VERBOSITY": "12"}, True),
        (["-lv", "9"], {}, False),
        ([], {}, False),
    ],
)
def test_verbose_is_also_every_models_option(argv: list[str], environ: dict[str, str], verbose: bool) -> None:
    """llama-server's ``verbosity > 9`` (``-v`` sets it to INT_MAX) is the default of a request's
    ``verbose``, and llama.cpp's router passes ``-v``/``-lv`` to every child: besides the service's
    log level, each model's worker gets ``--verbose`` (its answers carry ``__verbose``)."""
    from service.llamacpp.options import model_settings
    from service.supervision.worker_args import inference_argv
    from workers.inference._cli import parse_args

    settings = _settings(argv, environ)
    assert settings.log_level == ("debug" if argv or environ else "info"), "-lv 4 and above: debug"
    config = model_settings({**settings.model_env_args, **settings.model_args}, {}).config
    assert config.params.get("verbose", False) is verbose and not config.ignored
    argv = inference_argv(settings, "m", "/m/m.gguf", "m-1", 9000, dict(config.params))
    assert parse_args(argv[3:]).verbose is verbose
