"""A self-signed certificate for tests that speak TLS to a server of their own on 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed(folder: Path) -> tuple[Path, Path]:
    """``(cert.pem, key.pem)`` in ``folder``, valid a day for ``localhost`` and ``127.0.0.1``; skips the
    test, saying why, where openssl is missing."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
