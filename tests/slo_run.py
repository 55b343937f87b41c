"""`python -m tests.slo_run <benchmarks arguments>`: the harness's command line with the scripted serving engine of
tests/slo_server.py in its catalog, for tests that run (and kill) a capacity search in a process of its own."""
import sys

from benchmarks.cli import main
from benchmarks.engines import catalog
from tests.slo_server import ROW

if __name__ == "__main__":
    catalog.ENGINES[ROW.name] = ROW
    sys.exit(main(sys.argv[1:]))
