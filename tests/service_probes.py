"""Probes of a running service (``ServiceProcess``): its events, its models, its workers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import psutil

from devtools.service_process import ServiceProcess
from tests.eventually import eventually


def events(svc: ServiceProcess, **params: Any) -> list[dict[str, Any]]:
    """Every matching event (follows next_after paging)."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = httpx.get(f"{svc.url}/events", params={"limit": 1000, "after": after, **params}, timeout=10).json()
        found += page["events"]
        if page["next_after"] is None:
            return found
        after = page["next_after"]


def wait_for_event(svc: ServiceProcess, type_: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
    """The latest ``type_`` event, waiting for the first one (a signal, not a sleep)."""
    found = eventually(lambda: events(svc, type=type_, **params), f"a {type_} event", timeout=timeout, interval=0.05)
    return found[-1]


def model_entry(svc: ServiceProcess, name: str) -> dict[str, Any]:
    data = httpx.get(f"{svc.url}/models", timeout=10).json()["data"]
    return next(m for m in data if m["id"] == name)


def inference_children(svc: ServiceProcess) -> list[psutil.Process]:
    """Live inference worker processes started by this service: its direct children
    (a worker's own short-lived helpers, forked before they exec, show the worker's
    command line too)."""
    try:
        children = psutil.Process(svc.pid).children()
    except psutil.NoSuchProcess:
        return []
    result = []
    for child in children:
        try:
            if "workers.inference" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                result.append(child)
        except psutil.NoSuchProcess:
            continue
    return result


def exited(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie has: only its reaping is left)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def still_running(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Processes still running after ``timeout`` (a zombie has exited: only its
    reaping is left, to whoever inherited it)."""
    deadline = time.monotonic() + timeout
    while True:
        running = []
        for proc in procs:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    running.append(proc)
            except psutil.NoSuchProcess:
                continue
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.02)


def ps_output(svc: ServiceProcess) -> str:
    """What ``modelrouter ps`` prints against ``svc`` (wide, so no line is cut)."""
    env = {**os.environ, "MODELROUTER_URL": svc.url, "COLUMNS": "250"}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "ps"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def all_running(*services: ServiceProcess, timeout: float = 60) -> Iterator[tuple[ServiceProcess, ...]]:
    """Start ``services`` in order and stop them in reverse, also those started when a later one fails."""
    with ExitStack() as started:
        for svc in services:
            svc.start(timeout=timeout)
            started.callback(svc.stop)
        yield services
