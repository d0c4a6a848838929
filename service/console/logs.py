"""``modelrouter logs``: the end of a worker's log (``GET /models/{id}/logs``, ``GET /downloads/{job_id}/logs``)."""

from __future__ import annotations

import sys
from urllib.parse import quote

from service.console.client import Client, CliError


def logs(
    client: Client, model: str | None, *, instance: str | None, job: str | None, tail: int, follow: bool = False
) -> int:
    """Print the last ``tail`` lines of one instance's worker log (the latest by default), or of a
    download job's, as they are in the file; plain text on stdout, so it pipes into grep. With
    ``follow``, keep printing each new line (``GET /logs/stream``) until interrupted."""
    if (model is None) == (job is None):
        raise CliError("name a MODEL or a --job ID (not both)", code=2)
    if follow:
        if model is None:
            raise CliError("-f follows a MODEL's instance, not a --job", code=2)
        return _follow(client, model, instance, tail)
    if job is not None:
        if instance is not None:
            raise CliError("--instance names an instance of a MODEL, not of a --job", code=2)
        body = client.get(f"/downloads/{quote(job, safe='')}/logs", tail=tail)
    else:
        assert model is not None
        body = client.get(f"/models/{quote(model, safe='/:@')}/logs", instance=instance, tail=tail)
    out = sys.stdout
    for line in body["lines"]:
        out.write(line + "\n")
    out.flush()
    return 0


def _follow(client: Client, model: str, instance: str | None, tail: int) -> int:
    params = {"model": model, "tail": tail, **({"instance": instance} if instance else {})}
    out = sys.stdout
    try:
        with client.stream("GET", "/logs/stream", params=params) as events:
            for event, _id, data in events:
                if event == "log":
                    out.write(data + "\n")
                    out.flush()
                elif event == "error":  # relayed from the node that ran it, which stopped answering
                    raise CliError(f"the log stream ended: {data}")
    except KeyboardInterrupt:
        return 130
    return 0
