"""Where a rehearsal writes: a directory per run (none overwritten), `latest`, and one plane state per machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from dualtrack.local.rehearsal import local_state_dir, point_latest, run_directory


def test_each_run_gets_its_own_directory_and_latest_follows_the_newest(tmp_path: Path) -> None:
    first = run_directory(tmp_path, "pilot", now=1_764_930_000)
    first.mkdir()
    second = run_directory(tmp_path, "pilot", now=1_764_930_000)  # the same second: a suffix, not the same place
    second.mkdir()
    assert first.name == "20251205T102000Z-pilot" and second.name == "20251205T102000Z-pilot-2"
    point_latest(tmp_path, first)
    point_latest(tmp_path, second)
    assert (tmp_path / "latest").resolve() == second.resolve()
    assert not (tmp_path / "latest").readlink().is_absolute()  # the folder can move with its runs


def test_the_plane_state_is_one_place_per_machine_unless_moved(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    monkeypatch.delenv("DUALTRACK_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert local_state_dir() == tmp_path / "xdg" / "dualtrack" / "local-plane"
    monkeypatch.setenv("DUALTRACK_STATE_DIR", str(tmp_path / "elsewhere"))
    assert local_state_dir() == tmp_path / "elsewhere"
