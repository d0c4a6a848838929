"""A request sent by another local process (not the test's, not the service's): what any local user
could send to a port on loopback (issue 34: the workers answer only their service)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_ASK = textwrap.dedent("""
    import json, os, sys, urllib.error, urllib.request
    ask = json.loads(os.environ["ASK"])
    data = ask["body"].encode() if ask["body"] is not None else None
    request = urllib.request.Request(ask["url"], data=data, headers=ask["headers"], method=ask["method"])
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        status, body = refused.code, refused.read()
    print(json.dumps({"status": status, "body": body.decode("utf-8", "replace")}))
""")


@dataclass(frozen=True)
class Answer:
    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def ask(url: str, *, method: str = "GET", headers: Mapping[str, str] | None = None, body: Any = None) -> Answer:
    """``method url`` from a fresh Python process (stdlib only), with ``headers`` and a JSON ``body``."""
    sent = {"url": url, "method": method, "headers": dict(headers or {}), "body": None}
    if body is not None:
        sent["body"] = json.dumps(body)
        sent["headers"] = {"Content-Type": "application/json", **sent["headers"]}
    done = subprocess.run(
        [sys.executable, "-c", _ASK], env={"ASK": json.dumps(sent)}, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    return Answer(answer["status"], answer["body"])
