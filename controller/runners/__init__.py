from .base import Runner, get_runner

__all__ = ["Runner", "get_runner"]
