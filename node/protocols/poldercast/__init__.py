"""PolderCast (Setty et al. 2012): CYCLON, VICINITY and RINGS (``vicinity``, ``rings``) and
RingCast dissemination (``ringcast``); ``protocol`` stacks them and registers poldercast."""

from . import protocol  # noqa: F401  (registers poldercast)
