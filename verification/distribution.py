"""The distribution check at temperature > 0: speculative sampling must draw from the target's own distribution.

Pure statistics over two sample sets (AR baseline vs a speculative method, same prompt, same temperature, drawn
with disjoint seeds so that the two arms are independent):

- per position j < POSITIONS of the continuation, a two-sample G-test of the token marginals; tokens too rare for the
  asymptotics (expected count < MIN_EXPECTED in either arm) are pooled into one category, and "ended" (EOS earlier)
  is a category of its own;
- two sequence-level tests, which see joint faults that leave every marginal intact: a two-sample
  Kolmogorov-Smirnov test on the target's own log-likelihood of each sample (teacher-forced at the sampling
  temperature), and a G-test of the number of distinct tokens per sample (repetition);
- Holm's correction over every test of a cell (all prompts and positions), at family-wise level ALPHA.

Sizes come from a power calculation (`detectable_w`, `detectable_shift`): with SAMPLES = 200 per arm, two prompts and
POSITIONS = 6 (16 tests, so each runs at ALPHA / 16), a G-test with 12 pooled categories detects Cohen's w ≈ 0.31
with 90 % power, e.g. 20 % of the probability moved from one ~25 % token to another; the log-likelihood test detects a
location shift of ≈ 0.47 standard deviations. Doubling SAMPLES lowers both by √2 and doubles the sampling time. The
engine tests (tests/verification/test_distribution_faults.py) inject sampler faults and check that these sizes catch them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import stats

ALPHA = 0.01  # family-wise false-positive rate of one cell's check
SAMPLES = 200  # independent samples per arm and prompt
PROMPTS = 2  # prompts per dataset that are sampled
POSITIONS = 6  # continuation length: tokens tested per sample
MIN_EXPECTED = 5.0  # pool categories with a smaller expected count
POWER = 0.9
ENDED = -1  # the category of a sample that ended (EOS) before a position


@dataclass(frozen=True)
class Check:
    """One cell's verdict: Holm-adjusted p-values by test name, the smallest of them, and the sizes behind them."""

    p_values: dict[str, float]
    p_min: float  # the smallest Holm-adjusted p-value (the cell fails when it is below alpha)
    passed: bool
    n_base: int  # samples per prompt, baseline arm (smallest over prompts)
    n_method: int
    n_tests: int
    detectable_w: float  # Cohen's w a marginal test detects with POWER at the corrected level
    detectable_shift_sd: float  # log-likelihood location shift (in SDs) detected with POWER
    alpha: float = ALPHA
    raw: dict[str, float] = field(default_factory=dict)


def padded(samples: list[list[int]], length: int) -> np.ndarray:
    """Samples as an [n, length] array, ENDED after a sample's last token."""
    out = np.full((len(samples), length), ENDED, dtype=np.int64)
    for i, s in enumerate(samples):
        s = s[:length]
        out[i, : len(s)] = s
    return out


def distinct(x: np.ndarray) -> np.ndarray:
    """Distinct tokens per sample (ENDED counted once): repetition within a sample, a joint property that shared
    random draws across positions change while each position's marginal may stay intact."""
    return np.array([len(set(row.tolist())) for row in x])


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
    """p-value of the two-sample G-test of homogeneity of two token samples (1.0 when only one category is left)."""
    table = pooled_table(a, b)
    if table.shape[1] < 2:
        return 1.0
    return float(stats.chi2_contingency(table, correction=False, lambda_="log-likelihood").pvalue)


def ks_test(a: list[float], b: list[float]) -> float:
    """p-value of the two-sample Kolmogorov-Smirnov test (ties make it conservative)."""
    if len(a) == 0 or len(b) == 0:
        return math.nan
    return float(stats.ks_2samp(a, b).pvalue)


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values (monotone, capped at 1); NaN entries are dropped."""
    items = sorted(((p, k) for k, p in p_values.items() if not math.isnan(p)))
    m, out, running = len(items), {}, 0.0
    for i, (p, k) in enumerate(items):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out


@lru_cache(maxsize=256)
def detectable_w(n_a: int, n_b: int, df: int, alpha: float, power: float = POWER) -> float:
    """Smallest Cohen's w a chi-square/G test with df degrees of freedom detects with `power` at level `alpha`.

    For two arms, w² = n_a n_b / N² · Σ_c (p_c − q_c)² / m_c, with m_c the pooled probability of category c.
    """
    crit = stats.chi2.ppf(1 - alpha, df)
    lo, hi = 0.0, 1000.0
    for _ in range(60):  # the noncentrality that reaches the power
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if stats.ncx2.sf(crit, df, mid) < power else (lo, mid)
    return math.sqrt(hi / (n_a + n_b))


def detectable_shift(n_a: int, n_b: int, alpha: float, power: float = POWER) -> float:
    """Location shift (in standard deviations) a two-sided two-sample test detects with `power` (normal theory)."""
    return (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * math.sqrt(1 / n_a + 1 / n_b)


def check(base: list[dict], method: list[dict], alpha: float = ALPHA, positions: int = POSITIONS,
          df: int = 11) -> Check | None:
    """Compare per-prompt sample sets: dicts with `prompt_sha256`, `samples` (token lists), `loglik` (floats or None).

    Prompts are paired by hash; None when no prompt has samples in both arms.
    """
    by_sha = {s["prompt_sha256"]: s for s in base}
    pairs = [(by_sha[m["prompt_sha256"]], m) for m in method if m["prompt_sha256"] in by_sha]
    pairs = [(b, m) for b, m in pairs if b["samples"] and m["samples"]]
    if not pairs:
        return None
    raw: dict[str, float] = {}
    for i, (b, m) in enumerate(pairs):
        xa, xb = padded(b["samples"], positions), padded(m["samples"], positions)
        for j in range(positions):
            raw[f"p{i}_pos{j + 1}"] = g_test(xa[:, j], xb[:, j])
        raw[f"p{i}_distinct"] = g_test(distinct(xa), distinct(xb))
        if b.get("loglik") is not None and m.get("loglik") is not None:
            raw[f"p{i}_loglik"] = ks_test(b["loglik"], m["loglik"])
    adjusted = holm(raw)
    p_min = min(adjusted.values(), default=math.nan)
    n_a = min(len(b["samples"]) for b, _ in pairs)
    n_b = min(len(m["samples"]) for _, m in pairs)
    level = alpha / max(len(adjusted), 1)
    return Check(p_values=adjusted, p_min=p_min, passed=not p_min < alpha, n_base=n_a, n_method=n_b,
                 n_tests=len(adjusted), detectable_w=detectable_w(n_a, n_b, df, level),
                 detectable_shift_sd=detectable_shift(n_a, n_b, level), alpha=alpha, raw=raw)


def report_markdown(rows: list[dict]) -> str:
    """The "Distribution check (T > 0)" section of report.md: one line per speculative row at T > 0."""
    sampled = [r for r in rows if r["method"] != "baseline" and r["temperature"] and r["temperature"] > 0]
    if not sampled:
        return "No speculative cell ran at temperature > 0."
    head = (f"Each speculative cell at T > 0 against the AR baseline at the same temperature: {SAMPLES} independent "
            f"samples per arm (disjoint seeds; vLLM's are unseeded) of the first {PROMPTS} prompts per dataset, {POSITIONS} tokens each. "
            f"Tests: a G-test of the token marginals at each position (expected counts < {MIN_EXPECTED:g} pooled), "
            f"a Kolmogorov-Smirnov test of the target's teacher-forced log-likelihood of each sample and a G-test of "
            f"the number of distinct tokens per sample; Holm's "
            f"correction over all of a cell's tests, family-wise α = {ALPHA}. Detectable: the smallest Cohen's w "
            f"(marginals) found with {POWER:.0%} power at the corrected level.")
    lines = ["| dataset | engine | method | T | verdict | min adj. p | tests | n AR | n method | detectable w |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sampled:
        p = r.get("dist_p_min")
        w = r.get("dist_detectable_w")
        lines.append(f"| {r['dataset']} | {r['engine']} | {r['label']} | {r['temperature']:g} | "
                     f"{r.get('dist_verdict') or 'unchecked'} | {'–' if p is None else f'{p:.3g}'} | "
                     f"{r.get('dist_n_tests') or '–'} | {r.get('dist_n_base') or '–'} | "
                     f"{r.get('dist_n_method') or '–'} | {'–' if w is None else f'{w:.2f}'} |")
    return head + "\n\n" + "\n".join(lines)
