"""A local run's private folder (controller/backends/private.py): 0700, and removed by the next
run when the controller that made it died."""

import os
import subprocess

from controller.backends import private


def test_a_folder_whose_controller_died_is_removed_by_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setattr(private, "_bases", lambda: [tmp_path])
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = private.private_folder()
    (orphan / "pki").mkdir()
    (orphan / "pki" / "controller.key").write_text("secret")
    (orphan / private.OWNER).write_text(str(dead.pid))  # as a controller killed with -9 leaves it
    foreign = tmp_path / "overlaylab-notours"
    foreign.mkdir()  # no owner file: left alone
    live = private.private_folder()
    assert oct(live.stat().st_mode & 0o777) == "0o700"
    assert (live / private.OWNER).read_text() == str(os.getpid())
    assert not orphan.exists() and live.exists() and foreign.exists()
    assert private.sweep() == []  # this process is alive: its folder stays
