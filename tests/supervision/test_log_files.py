"""A worker's log file: rotated at its size with its backups, the budget of all of them, and the tail read
back across a rotation (:mod:`service.supervision.log_files`)."""

from __future__ import annotations

from pathlib import Path

from service.supervision.log_files import LogLimits, RotatingFile, enforce_budget, tail_lines


def test_a_file_rotates_at_its_size_and_keeps_its_backups(tmp_path: Path) -> None:
    path = tmp_path / "instance-a.log"
    f = RotatingFile(path, LogLimits(max_bytes=100, backups=2))
    for i in range(40):
        f.write(f"line {i:04d} .........\n".encode())  # 20 bytes a line: 5 a file
    f.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["instance-a.log", "instance-a.log.1", "instance-a.log.2"]
    assert all(p.stat().st_size <= 100 for p in tmp_path.iterdir())
    assert path.read_text().splitlines()[-1].startswith("line 0039")
    assert (tmp_path / "instance-a.log.2").read_text().startswith("line 0025")
    assert tail_lines(path, 7)[0].startswith("line 0033")  # the tail reaches into .1


def test_the_budget_deletes_the_oldest_files_first_never_an_open_one(tmp_path: Path) -> None:
    import os

    for i, name in enumerate(["a.log", "b.log", "c.log", "d.log"]):
        p = tmp_path / name
        p.write_bytes(b"x" * 100)
        os.utime(p, (1000 + i, 1000 + i))
    deleted = enforce_budget(tmp_path, 250, active=[tmp_path / "a.log"])
    assert [p.name for p in deleted] == ["b.log", "c.log"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log", "d.log"]
