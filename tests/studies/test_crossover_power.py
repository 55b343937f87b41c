"""study crossover-power: the crossover rule's power over simulated runs of a batch matrix, and its bounded inputs."""
from __future__ import annotations

import pytest

from benchmarks.cli import main
from benchmarks.core.paths import ROOT
from benchmarks.studies import crossover_power

BATCH = ROOT / "configs" / "matrices" / "tiny-batch.yaml"


def test_a_clear_crossover_is_found_most_often_and_the_fractions_add_up():
    p = crossover_power.simulate([1, 2, 4, 8], [48, 24, 12, 6], [1.3, 1.1, 0.85, 0.7], 0.1, 400, 0)
    assert p.true_level == 4 and p.found_true > 0.5
    assert p.found_true + p.found_early + p.found_later + p.found_none == pytest.approx(1.0)


def test_the_command_prints_the_power_of_a_shipped_matrix(capsys):
    assert main(["study", "crossover-power", str(BATCH), "--runs", "200"]) == 0
    assert "Over 200 simulated runs (batch-to-batch log-sd 0.1): the true crossover" in capsys.readouterr().out


@pytest.mark.parametrize("option, fragment", [
    (["--runs", "30000000"], "argument --runs: 30000000: expected an int from 1 to 200000"),
    (["--runs", "0"], "argument --runs: 0: expected an int from 1 to 200000"),
    (["--seed", "-1"], "argument --seed: -1: expected an int from 0 to 4294967295"),
    (["--sd", "nan"], "argument --sd: nan: expected a number from 1e-09 to 10"),
    (["--speedups", "1.2,0"], "argument --speedups: 0: expected one or more numbers separated by commas, each from "
                              "0.001 to 1000"),
])
def test_a_run_count_or_seed_out_of_bounds_is_refused_before_any_run(option, fragment, capsys):
    with pytest.raises(SystemExit) as refused:  # as the option is parsed
        main(["study", "crossover-power", str(BATCH), *option])
    assert refused.value.code == 2 and fragment in capsys.readouterr().err
