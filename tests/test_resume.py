"""tests/resume.py: a run records each finished test with its worst outcome and its seconds, a second run leaves
those out, and shards split the suite by files without overlap."""
import pytest

from tests.resume import failures, finished

SUITE = {
    "test_a.py": "def test_pass(): pass\ndef test_fail(): assert False\n",
    "test_b.py": "import pytest\n@pytest.fixture\ndef broken():\n    yield\n    raise RuntimeError('teardown')\n"
                 "def test_teardown_fails(broken): pass\ndef test_skip(): pytest.skip('no socket')\n",
    "test_c.py": "def test_other(): pass\n",
}


@pytest.fixture(autouse=True)
def _not_the_outer_run(monkeypatch):
    """The suite that runs these tests may itself record and shard (preparation/chip_test.sh): not the inner runs."""
    monkeypatch.delenv("DFLASH_TEST_RESUME", raising=False)
    monkeypatch.delenv("DFLASH_TEST_SHARD", raising=False)


def test_a_second_run_goes_on_where_the_first_stopped(pytester, monkeypatch):
    pytester.makepyfile(**{name.removesuffix(".py"): text for name, text in SUITE.items()})
    record = pytester.path / "done.tsv"
    monkeypatch.setenv("DFLASH_TEST_RESUME", str(record))
    first = pytester.runpytest("-p", "tests.resume", "-p", "no:cacheprovider", "test_a.py", "test_b.py")
    first.assert_outcomes(passed=2, failed=1, skipped=1, errors=1)
    assert finished(record) == {"test_a.py::test_pass": "passed", "test_a.py::test_fail": "failed",
                                "test_b.py::test_teardown_fails": "failed", "test_b.py::test_skip": "skipped"}
    # each failure's report, written as it happened
    reports = failures(record).read_text()
    assert "test_a.py::test_fail (call)" in reports and "assert False" in reports
    assert "test_b.py::test_teardown_fails (teardown)" in reports and "RuntimeError: teardown" in reports
    assert all(float(line.split("\t")[2]) >= 0 for line in record.read_text().splitlines())  # each test's seconds
    record.write_text(record.read_text() + "test_c.py::test_other\tpassed")  # torn by a kill: not a finished test
    second = pytester.runpytest("-p", "tests.resume", "-p", "no:cacheprovider")
    second.assert_outcomes(passed=1, deselected=4)
    assert "resume: 4 test(s) finished in an earlier run left out" in second.stdout.str()


def test_shards_split_the_files_and_together_run_them_all(pytester, monkeypatch):
    pytester.makepyfile(**{name.removesuffix(".py"): text for name, text in SUITE.items()})
    ran = []
    for shard in ("0/2", "1/2"):
        monkeypatch.setenv("DFLASH_TEST_SHARD", shard)
        result = pytester.runpytest("-p", "tests.resume", "-p", "no:cacheprovider", "--collect-only", "-q")
        ran += [line for line in result.stdout.lines if "::" in line]
    assert sorted(ran) == sorted(f"{name}::{test}" for name, text in SUITE.items()
                                 for test in [line[4:].split("(")[0] for line in text.split("\n")
                                              if line.startswith("def test_")])
    monkeypatch.setenv("DFLASH_TEST_SHARD", "2/2")
    assert "I runs from 0 to N - 1" in pytester.runpytest("-p", "tests.resume").stderr.str()


@pytest.mark.parametrize("spec", ["x", "1", "1/0"])
def test_a_shard_that_is_not_i_of_n_is_refused(pytester, monkeypatch, spec):
    monkeypatch.setenv("DFLASH_TEST_SHARD", spec)
    assert "DFLASH_TEST_SHARD" in pytester.runpytest("-p", "tests.resume").stderr.str()
