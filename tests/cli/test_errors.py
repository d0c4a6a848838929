"""Bad input, unknown names, a service that is not there: one line on stderr, exit != 0, no traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from devtools.service_process import ServiceProcess
from service.supervision.ports import free_port
from tests.cli.conftest import cli


def _one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    for word in words:
        assert word in line
    return line


def test_no_service_says_how_to_start_one() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for command in (["ls"], ["pull", "org/repo-GGUF"], ["run", "m", "hi"], ["events", "--follow"]):
        line = _one_line(cli(url, *command), "cannot reach modelrouter at", url, "modelrouter serve")
        assert line.startswith(f"modelrouter {command[0]}: error:")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["pull"], ["required", "--help"]),
        (["history"], ["required"]),
        (["events", "--after", "ten"], ["invalid int"]),
        (["frobnicate"], ["invalid choice"]),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], words: list[str]) -> None:
    result = cli("http://127.0.0.1:9", *args)
    _one_line(result, *words)
    assert result.returncode == 2


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["history", "nobody/nothing"], ["not found", "model_not_found"]),
        (["pull", "nobody/nothing-GGUF"], ["nobody/nothing-GGUF"]),
        (["run", "nobody/nothing", "hi"], ["not found"]),
        (["events", "--since", "yesterday"], ["since"]),
        (["cancel", "nobody/nothing"], ["neither a listed model nor a download job id"]),
        (["rm", "nobody/nothing"], ["not found"]),
    ],
)
def test_refusals_from_the_service_are_one_line(svc: ServiceProcess, args: list[str], words: list[str]) -> None:
    _one_line(cli(svc, *args), *words)


@pytest.mark.parametrize("command", ["pull", "ls", "ps", "load", "unload", "rm", "cancel", "run", "history", "events"])
def test_every_command_has_help_with_examples(command: str) -> None:
    result = cli("http://127.0.0.1:9", command, "--help")
    assert result.returncode == 0
    assert "examples:" in result.stdout and "MODELROUTER_URL" in result.stdout


def test_the_api_key_is_sent_from_the_environment(tmp_path: Path) -> None:
    with ServiceProcess(tmp_path / "home", args=["--api-key", "sekrit"]) as keyed:
        _one_line(cli(keyed, "ls"), "Invalid API Key")
        _one_line(cli(keyed, "ls", MODELROUTER_API_KEY="wrong"), "Invalid API Key")
        allowed = cli(keyed, "ls", MODELROUTER_API_KEY="sekrit")
        assert allowed.returncode == 0, allowed.stderr
        assert "no models yet" in allowed.stdout
