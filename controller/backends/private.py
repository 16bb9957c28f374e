"""A local run's private folder: its peers' Unix sockets and its private keys (``security.tls``).

Made in memory where the machine has a tmpfs (``/dev/shm``), else in ``$TMPDIR``; mode 0700, so
no other user can open a socket or read a key in it; removed when the run ends. A controller
killed outright cannot remove it, so each local run first removes the folders of this user whose
controller (``controller.pid``) is gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "overlaylab-"
OWNER = "controller.pid"


def _bases() -> list[Path]:
    shm = Path("/dev/shm")
    return [shm] if shm.is_dir() and os.access(shm, os.W_OK) else [Path(tempfile.gettempdir())]


def private_folder() -> Path:
    """A new private folder for a run of this process (after :func:`sweep`)."""
    sweep()
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=_bases()[0]))
    (path / OWNER).write_text(str(os.getpid()))
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> list[Path]:
    """Remove this user's private folders whose controller process is gone; returns them."""
    removed = []
    for base in _bases():
        for path in base.glob(PREFIX + "*"):
            try:
                if path.stat().st_uid != os.getuid() or _alive(int((path / OWNER).read_text())):
                    continue
            except (OSError, ValueError):
                continue  # not one of ours, or still being made
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
