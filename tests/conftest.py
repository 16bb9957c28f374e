import os
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items):
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in ("unit", "component", "chart", "image", "cluster"):
            item.add_marker(getattr(pytest.mark, tier))
    # The slow tests first: xdist's load scheduling deals them out before the short ones, so no
    # worker is left running a long test alone at the end.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def spark():
    from analysis.spark import get_spark

    session = get_spark("overlaylab-tests", master="local[1]")
    yield session
    session.stop()


# A protocol registered from outside the package (tests/toy_protocol.py): the conformance suite
# checks it with the built-in ones; local peers import it through $OVERLAYLAB_PROTOCOLS.
import tests.toy_protocol  # noqa: E402,F401

PLUGIN_ENV = {"OVERLAYLAB_PROTOCOLS": "tests.toy_protocol"}
