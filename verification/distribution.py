"""The distribution check at temperature > 0: speculative sampling must draw from the target's own distribution.

Pure statistics over two independent sample sets (AR baseline vs a speculative method, same prompt and temperature),
SAMPLES samples of LENGTH tokens per prompt: per position j < POSITIONS a Williams-corrected two-sample G-test of the
token marginals (rare tokens pooled, "ended" a category of its own); the target's raw log-likelihood of each sample
(`loglik`, scored by the engine that drew it) by Welch's test of equal means; the number of distinct tokens by the
G-test; Holm's correction at family-wise level ALPHA over one cell's tests (`check`) or a whole run's (`run_family`).
Stated power is simulated at the row's sizes (`power`). Why these tests, their sizes, power, measured false-positive
rates and the fault tests: docs/sampling-check.md.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
from scipy import stats

from benchmarks.records.summary_row import SummaryRow

ALPHA = 0.01  # family-wise false-positive rate of a cell's check, and of a run's (run_family)
SAMPLES = 200  # independent samples per arm and prompt
PROMPTS = 2  # prompts per dataset that are sampled
LENGTH = 12  # tokens per sample: the sequence-level statistics read all of them
POSITIONS = 6  # leading positions whose marginals are tested
MIN_EXPECTED = 5.0  # pool categories with a smaller expected count
ENDED = -1  # the category of a sample that ended (EOS) before a position
SCORING = "raw"  # what a samples record's `loglik` holds: log p_target(sample | prompt) at temperature 1
# The reference alternatives of the simulated power: MOVED of the mass moved between REFERENCE's two 25 % tokens
# (one position's marginal, Cohen's w 0.31), and a location shift of SHIFT_SD standard deviations of a normal
# sequence-level statistic.
REFERENCE = (0.25, 0.25, 0.15, 0.1, 0.1, 0.05, 0.04, 0.03, 0.02, 0.005, 0.005)
MOVED = 0.2
SHIFT_SD = 0.5
POWER = 0.9  # the power at which `power` states the detectable shift
MARGINAL_REPS, SEQUENCE_REPS = 1000, 4000  # simulation sizes: binomial error <= 1.6 and 0.8 percentage points


@dataclass(frozen=True)
class Check:
    """One cell's verdict: Holm-adjusted p-values by test name, the smallest of them, and the sizes behind them."""

    p_values: dict[str, float]
    p_min: float  # the smallest Holm-adjusted p-value (the cell fails when it is below alpha)
    passed: bool
    n_base: int  # samples per prompt, baseline arm (smallest over prompts)
    n_method: int
    n_tests: int  # this cell's tests
    family: int = 0  # the tests Holm corrected over: this cell's, or a whole run's (run_family)
    length: int | None = None  # tokens drawn per sample (None: not recorded)
    alpha: float = ALPHA
    raw: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Power:
    """Simulated power of a check's tests at its sizes and per-test level."""

    level: float  # ALPHA / family
    marginal: float  # one position's G-test against REFERENCE with MOVED moved
    w: float  # Cohen's w of that alternative
    sequence: float  # a sequence-level mean test against a SHIFT_SD shift
    shift_detected: float  # the shift (in SDs) the mean test detects with POWER


def padded(samples: list[list[int]], length: int) -> np.ndarray:
    """Samples as an [n, length] array, ENDED after a sample's last token."""
    out = np.full((len(samples), length), ENDED, dtype=np.int64)
    for i, s in enumerate(samples):
        s = s[:length]
        out[i, : len(s)] = s
    return out


def distinct(samples: list[list[int]]) -> np.ndarray:
    """Distinct tokens per sample: repetition within a sample, a joint property that shared random draws across
    positions change while each position's marginal may stay intact."""
    return np.array([len(set(s)) for s in samples], dtype=np.int64)


def pooled_table(a: np.ndarray, b: np.ndarray, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """The 2 x C contingency table of two token arrays, categories with expected count < min_expected pooled."""
    cats, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    counts = np.zeros((2, len(cats)), dtype=np.int64)
    np.add.at(counts[0], inverse[: len(a)], 1)
    np.add.at(counts[1], inverse[len(a):], 1)
    share = min(len(a), len(b)) / (len(a) + len(b))
    rare = counts.sum(axis=0) * share < min_expected
    table = counts[:, ~rare]
    if rare.any():
        table = np.column_stack([table, counts[:, rare].sum(axis=1)])
    # the pooled column itself may still be too small: fold it into the smallest other column
    order = np.argsort(table.sum(axis=0))
    if table.shape[1] > 1 and table[:, order[0]].sum() * share < min_expected:
        table[:, order[1]] += table[:, order[0]]
        table = np.delete(table, order[0], axis=1)
    return table


def g_test(a: np.ndarray, b: np.ndarray) -> float:
    """p-value of the two-sample G-test of homogeneity of two token samples (1.0 when only one category is left):
    G = 2 sum obs ln(obs / expected) over the pooled table with Williams' correction (G / q), chi-square with C - 1
    degrees of freedom. Uncorrected, G's tail is too heavy at the check's levels: on the synthetic chain of
    tests/verification/test_distribution.py it rejected 1.5-1.7x as often as nominal at 1e-3..1e-4 (60 000 tables),
    with the correction 0.85-1.05x; Pearson's X² was conservative there (0.2-0.6x)."""
    table = pooled_table(a, b)
    if table.shape[1] < 2:
        return 1.0
    n, rows, cols = table.sum(), table.sum(axis=1), table.sum(axis=0)
    expected = np.outer(rows, cols) / n
    seen = table > 0
    g = 2.0 * float(np.sum(table[seen] * np.log(table[seen] / expected[seen])))
    df = table.shape[1] - 1
    q = 1.0 + (n * np.sum(1.0 / rows) - 1.0) * (n * np.sum(1.0 / cols) - 1.0) / (6.0 * n * df)
    return float(stats.chi2.sf(g / q, df))


def mean_test(a: Any, b: Any) -> Any:
    """Two-sided p-value of Welch's test that two samples have equal means, along the last axis (so a simulation
    runs it on many sample pairs at once). Two constant samples: 1.0 if equal, else 0.0; NaN below 2 per arm."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = a.shape[-1], b.shape[-1]
    if na < 2 or nb < 2:
        return math.nan
    va, vb = a.var(axis=-1, ddof=1) / na, b.var(axis=-1, ddof=1) / nb
    diff = b.mean(axis=-1) - a.mean(axis=-1)
    se2 = va + vb
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(diff) / np.sqrt(se2)
        df = se2 ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
        p = 2.0 * stats.t.sf(t, df)
    p = np.where(se2 > 0, p, np.where(diff == 0, 1.0, 0.0))
    return float(p) if p.ndim == 0 else p


def holm(p_values: dict[Any, float], family: int | None = None) -> dict[Any, float]:
    """Holm-Bonferroni adjusted p-values (monotone, capped at 1) over a family of `family` tests (default: the given
    ones; more when the others are not known, as if their p-values were 1); NaN entries are dropped."""
    items = sorted(((p, k) for k, p in p_values.items() if not math.isnan(p)), key=lambda x: x[0])
    m = max(family or 0, len(items))
    out, running = {}, 0.0
    for i, (p, k) in enumerate(items):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out


class SampleSet(Protocol):
    """One prompt's samples of one arm (a `samples` record): token lists, the target's log-likelihood of each where
    scored, how it was scored, and the tokens asked per sample."""

    @property
    def prompt_sha256(self) -> str: ...
    @property
    def samples(self) -> list[list[int]]: ...
    @property
    def loglik(self) -> list[float] | None: ...
    @property
    def scoring(self) -> str | None: ...
    @property
    def length(self) -> int | None: ...


@dataclass(frozen=True)
class Samples:
    """A SampleSet of one's own (a study's arm, a simulation's)."""

    prompt_sha256: str
    samples: list[list[int]]
    loglik: list[float] | None = None
    scoring: str | None = None
    length: int | None = None


def check(base: Sequence[SampleSet], method: Sequence[SampleSet], alpha: float = ALPHA, positions: int = POSITIONS,
          family: int | None = None) -> Check | None:
    """Compare per-prompt sample sets of the two arms.

    Prompts are paired by hash; None when no prompt has samples in both arms. The sequence-level tests run only where
    both arms drew the same length (and, for loglik, were scored the same way). `family`: the number of tests Holm
    corrects over, when this cell is one of several (default: its own tests).
    """
    by_sha = {s.prompt_sha256: s for s in base}
    pairs = [(by_sha[m.prompt_sha256], m) for m in method if m.prompt_sha256 in by_sha]
    pairs = [(b, m) for b, m in pairs if b.samples and m.samples]
    if not pairs:
        return None
    raw: dict[str, float] = {}
    for i, (b, m) in enumerate(pairs):
        xa, xb = padded(b.samples, positions), padded(m.samples, positions)
        for j in range(positions):
            raw[f"p{i}_pos{j + 1}"] = g_test(xa[:, j], xb[:, j])
        if b.length == m.length:
            raw[f"p{i}_distinct"] = g_test(distinct(b.samples), distinct(m.samples))
            if b.loglik is not None and m.loglik is not None and b.scoring == m.scoring:
                raw[f"p{i}_loglik"] = mean_test(b.loglik, m.loglik)
    adjusted = holm(raw, family)
    p_min = min(adjusted.values(), default=math.nan)
    lengths = {s.length for pair in pairs for s in pair}
    return Check(p_values=adjusted, p_min=p_min, passed=not p_min < alpha,
                 n_base=min(len(b.samples) for b, _ in pairs), n_method=min(len(m.samples) for _, m in pairs),
                 n_tests=len(adjusted), family=max(family or 0, len(adjusted)),
                 length=lengths.pop() if len(lengths) == 1 else None, alpha=alpha, raw=raw)


def run_family(checks: list[Check], alpha: float = ALPHA) -> list[Check]:
    """The checks again, Holm-adjusted over the union of their tests: one family per run, so that the chance that any
    of them fails when every sampler is correct is at most alpha (whatever their dependence: rows at one temperature
    share a baseline)."""
    adjusted = holm({(i, k): p for i, c in enumerate(checks) for k, p in c.raw.items()})
    out = []
    for i, c in enumerate(checks):
        mine = {k: p for (j, k), p in adjusted.items() if j == i}
        p_min = min(mine.values(), default=math.nan)
        out.append(dataclasses.replace(c, p_values=mine, p_min=p_min, passed=not p_min < alpha,
                                       family=len(adjusted), alpha=alpha))
    return out


def cohens_w(p: np.ndarray, q: np.ndarray, n_a: int, n_b: int) -> float:
    """Cohen's w of two arms' category probabilities: w² = n_a n_b / N² · Σ (p − q)² / m, m the pooled mixture."""
    n = n_a + n_b
    m = (n_a * p + n_b * q) / n
    return math.sqrt(n_a * n_b / n ** 2 * float(np.sum((p - q) ** 2 / m)))


def reference_pair() -> tuple[np.ndarray, np.ndarray]:
    """The marginal alternative of the simulated power: REFERENCE, and REFERENCE with MOVED moved from its first
    25 % token to its second."""
    p = np.array(REFERENCE)
    q = p.copy()
    q[0] -= MOVED
    q[1] += MOVED
    return p, q


@lru_cache(maxsize=64)
def power(n_a: int, n_b: int, family: int, alpha: float = ALPHA, seed: int = 0) -> Power:
    """The check's power by simulation at its sizes and per-test level alpha / family: `g_test` on MARGINAL_REPS
    pairs of samples from the two `reference_pair` distributions, and `mean_test` on SEQUENCE_REPS pairs of
    standard normal samples, one shifted by SHIFT_SD; then the shift that the same draws detect with POWER (shifting
    moves Welch's statistic by shift / se and leaves its df). Seeded: the same sizes give the same figures. ~0.2 s."""
    level = alpha / max(family, 1)
    rng = np.random.default_rng(seed)
    p, q = reference_pair()
    hits = sum(g_test(rng.choice(len(p), n_a, p=p), rng.choice(len(q), n_b, p=q)) <= level
               for _ in range(MARGINAL_REPS))
    x, y = rng.standard_normal((SEQUENCE_REPS, n_a)), rng.standard_normal((SEQUENCE_REPS, n_b))
    sequence = float(np.mean(mean_test(x, y + SHIFT_SD) <= level))
    va, vb = x.var(axis=-1, ddof=1) / n_a, y.var(axis=-1, ddof=1) / n_b
    se, df = np.sqrt(va + vb), (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    diff = y.mean(axis=-1) - x.mean(axis=-1)
    lo, hi = 0.0, 5.0
    for _ in range(40):
        mid = (lo + hi) / 2
        found = np.mean(2.0 * stats.t.sf(np.abs(diff + mid) / se, df) <= level)
        lo, hi = (mid, hi) if found < POWER else (lo, mid)
    return Power(level=level, marginal=hits / MARGINAL_REPS, w=cohens_w(p, q, n_a, n_b), sequence=sequence,
                 shift_detected=hi)


def report_markdown(rows: list[SummaryRow]) -> str:
    """The "Distribution check (T > 0)" section of report.md: one line per speculative row at T > 0."""
    sampled = [r for r in rows if r.method != "baseline" and r.temperature and r.temperature > 0]
    if not sampled:
        return "No speculative cell ran at temperature > 0."
    checked = [r for r in sampled if r.dist_family]
    family = max((r.dist_family or 0 for r in checked), default=0)
    cells = len({(r.engine, r.label, r.dataset, r.temperature) for r in checked})
    w = cohens_w(*reference_pair(), SAMPLES, SAMPLES)
    head = (f"Each speculative cell at T > 0 against the AR baseline of its engine at the same temperature: "
            f"{SAMPLES} independent samples per arm (JAX: disjoint seed ranges; vLLM: unseeded requests from "
            f"engines with distinct seeds per arm) of the first {PROMPTS} prompts per dataset, {LENGTH} tokens each. "
            f"Tests: a G-test of the token marginals at each of the first {POSITIONS} positions (expected counts < "
            f"{MIN_EXPECTED:g} pooled, Williams-corrected), and two whole-sample tests: Welch's test of equal means of "
            f"the target's raw log-likelihood of each sample, scored by the engine that drew it, and a G-test of the "
            f"number of distinct tokens per sample. "
            f"Holm's correction over all {family} tests of the run's {cells} checked cells, family-wise α = {ALPHA}: "
            f"the chance that a run whose samplers are all correct shows any FAIL is at most {ALPHA:.0%}. "
            f"Power is simulated with these very tests at each row's sizes and at the level α / {family or 'tests'} "
            f"(Holm's first step, a lower bound): *marginal*, one position's G-test when {MOVED:.0%} of the "
            f"probability moves between two 25 % tokens (Cohen's w {w:.2f}); "
            f"*sequence*, a whole-sample test against a {SHIFT_SD:g} SD shift; *{POWER:.0%} at*, the shift in SDs "
            f"it finds with {POWER:.0%} power.")
    lines = ["| dataset | engine | method | T | verdict | min adj. p | n AR | n method | tokens | tests (cell / run) "
             f"| power: marginal | power: sequence | {POWER:.0%} at |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def num(x: Any, fmt: str) -> str:
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "–"
        return str(int(x)) if fmt == "d" else format(x, fmt)

    for r in sampled:
        lines.append(f"| {r.dataset} | {r.engine} | {r.label} | {r.temperature:g} | "
                     f"{r.dist_verdict or 'unchecked'} | {num(r.dist_p_min, '.3g')} | "
                     f"{num(r.dist_n_base, 'd')} | {num(r.dist_n_method, 'd')} | "
                     f"{num(r.dist_length, 'd')} | {num(r.dist_n_tests, 'd')} / "
                     f"{num(r.dist_family, 'd')} | {num(r.dist_power_marginal, '.0%')} | "
                     f"{num(r.dist_power_sequence, '.0%')} | {num(r.dist_shift_detected, '.2f')} SD |")
    return head + "\n\n" + "\n".join(lines)
