"""SpiderCast (Chockler et al. 2007) and its comparison overlays (similarity, random_overlay,
ring_per_topic), all in ``protocol``."""

from . import protocol  # noqa: F401  (registers spidercast and its comparison overlays)
