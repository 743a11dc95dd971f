"""`memory-pipelines`: the command line (`main.py` holds the core commands, `online.py` and `tuning.py` theirs)."""

from .main import main

__all__ = ["main"]
