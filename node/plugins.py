"""Protocols from outside the package: the modules named in ``$OVERLAYLAB_PROTOCOLS``
(comma-separated, importable from the working directory or the environment) are imported by
the controller and by every peer process, so each registers its protocol in both."""

from __future__ import annotations

import importlib
import os

PLUGINS_ENV = "OVERLAYLAB_PROTOCOLS"


def load_plugins() -> None:
    """Import the protocol modules named in ``$OVERLAYLAB_PROTOCOLS``."""
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        importlib.import_module(module)
