"""The marker guard of tests/conftest.py: a test that compiles JAX without an engine marker fails, so that
`make test-fast` (which selects by marker) stays engine-free; the same test marked `jax` passes."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import pytest


def _compile():
    import jax

    jax.jit(lambda x: x * 3 + 1)(2.0).block_until_ready()


def test_unmarked():
    _compile()


@pytest.mark.jax
def test_marked():
    _compile()


def test_no_jax():
    assert sum(range(4)) == 6
"""


def test_an_unmarked_test_that_compiles_jax_fails(pytester, monkeypatch):
    pytester.makeconftest("from tests.conftest import *  # noqa: F401,F403\n")
    pytester.makepyfile(test_probe=PROBE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "markers=jax: x")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked*compiled*XLA program(s) but carries none of the markers*"])
