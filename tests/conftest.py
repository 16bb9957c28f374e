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


@pytest.fixture(scope="session")
def spark():
    from analysis.spark import get_spark

    session = get_spark("overlaylab-tests", master="local[1]")
    yield session
    session.stop()
