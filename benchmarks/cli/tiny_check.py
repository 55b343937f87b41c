"""`tiny check`: the command of benchmarks/tiny/check.py."""
from benchmarks.tiny.check import add_cli_args, main

__all__ = ["add_cli_args", "main"]
