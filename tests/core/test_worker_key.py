"""The lock's two decisions (:mod:`service.core.worker_key`): the secret taken out of the environment,
and who may pass."""

from __future__ import annotations

from service.core import worker_key

SECRET = "s3cret-0123456789abcdefghijklmnopqrstuvwxyzAB"


def test_the_secret_is_taken_out_of_the_environment_so_no_child_inherits_it() -> None:
    environ = {worker_key.ENV: SECRET, "PATH": "/bin"}
    assert worker_key.take(environ) == SECRET
    assert environ == {"PATH": "/bin"}
    assert worker_key.take(environ) is None  # started by hand: open (and said so)
    assert worker_key.take({worker_key.ENV: ""}) is None


def test_only_the_exact_secret_passes_and_no_refusal_quotes_what_was_sent() -> None:
    assert worker_key.refusal(SECRET, SECRET) is None
    missing = worker_key.refusal(SECRET, None)
    assert missing is not None and worker_key.HEADER in missing and "no" in missing
    for wrong in ("", SECRET[:-1], SECRET + "x", SECRET.upper(), "ünïcode"):
        refused = worker_key.refusal(SECRET, wrong)
        assert refused is not None and "wrong" in refused
        assert not wrong or wrong not in refused


def test_an_open_worker_lets_everyone_pass() -> None:
    assert worker_key.refusal(None, None) is None
    assert worker_key.refusal(None, "anything") is None
