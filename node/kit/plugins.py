"""Protocols from outside the package: the modules named in ``$OVERLAYLAB_PROTOCOLS``
(comma-separated) are imported by the controller and by every peer process, so each registers
its protocol in both. They are looked up on ``sys.path`` and then in the working directory."""

from __future__ import annotations

import importlib
import os
import sys

PLUGINS_ENV = "OVERLAYLAB_PROTOCOLS"


class PluginError(ImportError):
    """A module named in ``$OVERLAYLAB_PROTOCOLS`` cannot be imported."""


def load_plugins() -> None:
    """Import the protocol modules named in ``$OVERLAYLAB_PROTOCOLS``."""
    modules = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    if modules and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # last: a plugin never shadows an installed module
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise PluginError(f"${PLUGINS_ENV} names {module!r}, which cannot be imported: {e}") from e
