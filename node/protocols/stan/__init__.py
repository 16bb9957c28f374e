"""StaN (Matos et al.): per-topic views that share physical links (``protocol``)."""

from . import protocol  # noqa: F401  (registers stan)
