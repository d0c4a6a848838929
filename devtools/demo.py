"""``make demo``: the whole flow offline, against the project's own Hub server.

A generated repo holding a tiny real GGUF is served on 127.0.0.1; the service
downloads it (worker process, progress events, sha256), loads it (inference
worker), answers a chat request, and the log tells the story.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf

REPO = "demo/tiny-llama-GGUF"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        gguf = write_tiny_gguf(tmp / "tiny.gguf").read_bytes()
        with HubServer.start(tmp / "hub") as hub:
            make_repo(hub.root, REPO, {"tiny-Q4_K_M.gguf": gguf, "tiny-Q8_0.gguf": gguf})
            print(f"Hub server on {hub.url} serving {REPO}")
            with ServiceProcess(tmp / "home", env={"HF_ENDPOINT": hub.url}) as svc:
                print(f"modelrouter on {svc.url}")
                job = httpx.post(f"{svc.url}/models", json={"model": REPO}, timeout=30).json()
                print(f"POST /models -> job {job['job_id']} for {job['model']}")
                while (state := httpx.get(f"{svc.url}/downloads/{job['job_id']}").json())["status"] not in {
                    "finished",
                    "failed",
                }:
                    time.sleep(0.05)
                print(f"download {state['status']}: {state['bytes_done']} bytes")
                chat = {"model": job["model"], "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8}
                reply = httpx.post(f"{svc.url}/v1/chat/completions", json=chat, timeout=60).json()
                print(f"chat (random weights, so gibberish): {reply['choices'][0]['message']['content']!r}")
                print("\nthe event log:")
                for event in httpx.get(f"{svc.url}/events", params={"limit": 1000}).json()["events"]:
                    if event["type"] != "download_progress":
                        print(f"  {event['position']:>3} {event['type']:<22} {event['model'] or ''}")


if __name__ == "__main__":
    main()
