"""The report's statistics against SciPy's (the reference implementation), and the properties the verdict uses."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lambdas.domain.evidence.evidence import (
    block_length,
    bootstrap,
    ratio_bootstrap,
    regularized_beta,
    t_cdf,
    t_quantile,
    tost,
)


@pytest.mark.parametrize("df", [1, 2, 3, 5, 11, 30, 200])
@pytest.mark.parametrize("t", [-8.0, -2.5, -1.0, -0.1, 0.0, 0.3, 1.7, 4.0, 12.0])
def test_student_t_matches_scipy(t: float, df: int) -> None:
    assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-10)


@pytest.mark.parametrize(("a", "b", "x"), [(0.5, 0.5, 0.3), (2.0, 3.0, 0.9), (10.0, 0.5, 0.99), (1.5, 40.0, 0.01)])
def test_incomplete_beta_matches_scipy(a: float, b: float, x: float) -> None:
    from scipy.special import betainc

    assert regularized_beta(a, b, x) == pytest.approx(betainc(a, b, x), rel=1e-10)


@pytest.mark.parametrize("df", [2, 4, 9])
def test_t_quantile_inverts_the_cdf(df: int) -> None:
    assert t_quantile(0.95, df) == pytest.approx(stats.t.ppf(0.95, df), abs=1e-8)


def test_tost_matches_two_one_sided_scipy_tests() -> None:
    diffs = [0.004, -0.002, 0.006, 0.001, 0.003]
    margin = 0.02
    result = tost(diffs, margin)
    lower = stats.ttest_1samp(diffs, -margin, alternative="greater").pvalue
    upper = stats.ttest_1samp(diffs, margin, alternative="less").pvalue
    assert result.p_lower == pytest.approx(lower, rel=1e-8) and result.p_upper == pytest.approx(upper, rel=1e-8)
    assert result.equivalent is True and result.different is False
    assert result.low is not None and result.high is not None and -margin < result.low < result.high < margin


def test_tost_says_not_shown_when_the_points_are_too_few_or_too_spread() -> None:
    assert tost([0.001], 0.05).equivalent is None  # one shared eval point: no variance to test with
    spread = tost([0.04, -0.045, 0.03], 0.05)
    assert spread.equivalent is False and spread.different is False
    assert "not shown equivalent" in spread.detail
    far = tost([0.2, 0.21, 0.19], 0.05)
    assert far.equivalent is False and far.different is True
    assert tost([0.0, 0.0, 0.0], 0.05).equivalent is True  # identical losses: inside any positive margin


def test_bootstrap_interval_is_reproducible_and_covers_the_median() -> None:
    rng = random.Random(1)
    times = [0.1 + rng.random() * 0.02 for _ in range(200)]
    first, second = bootstrap(times), bootstrap(times)
    assert first == second
    assert first is not None and first.low <= statistics.median(times) <= first.high
    assert first.high - first.low < 0.01
    assert bootstrap(times[:4]) is None  # too few steps to say anything


def test_ratio_interval_separates_a_real_difference_and_mostly_covers_noise() -> None:
    """Two tracks with the same step-time distribution: a 95 % interval of their ratio holds 1 in about 95 % of
    trials (here at least 34 of 40); a 30 % real difference is separated every time."""
    covered = separated = 0
    for seed in range(40):
        rng = random.Random(seed)
        gpu = [1.0 + rng.gauss(0, 0.05) for _ in range(60)]
        same = [1.0 + rng.gauss(0, 0.05) for _ in range(60)]
        faster = [0.7 + rng.gauss(0, 0.05) for _ in range(60)]
        noise, real = ratio_bootstrap(same, gpu, resamples=400), ratio_bootstrap(faster, gpu, resamples=400)
        assert noise is not None and real is not None
        covered += noise.contains(1.0)
        separated += real.high < 1
    assert covered >= 34 and separated == 40


def _ar1(persistence: float, seed: int, steps: int = 300) -> list[float]:
    """Step times around 1 s whose log follows an AR(1) with this persistence (0: independent steps)."""
    rng = random.Random(seed)
    load, times = 0.0, []
    for _ in range(steps):
        load = persistence * load + rng.gauss(0, 0.02)
        times.append(math.exp(load))
    return times


def test_the_block_length_grows_with_the_dependence() -> None:
    """Politis & White's choice: independent steps get the n^(1/3) floor (7 steps for 300 steps); steps with
    persistence 0.9 get blocks near their dependence (34 steps in theory; 300 steps underestimate it), capped at
    min(3 sqrt(n), n / 3) = 52."""
    assert block_length(_ar1(0.0, 1)) == 7
    assert 15 <= block_length(_ar1(0.9, 1)) <= 52


def test_drifting_steps_widen_the_interval_and_the_method_says_how() -> None:
    """Persistence 0.95: the order-aware interval is several times the i.i.d. bootstrap's, the run-to-run allowance
    adds to it, and the method string names the choices the report shows."""
    times = _ar1(0.95, 3)
    block, iid, within = bootstrap(times), bootstrap(times, method="iid"), bootstrap(times, run_spread=0.0)
    assert block is not None and iid is not None and within is not None
    assert block.high - block.low > 3 * (iid.high - iid.low)
    assert within.low > block.low and within.high < block.high
    assert "circular block bootstrap" in block.method and "5 batch medians" in block.method
    assert "2% run-to-run" in block.method and iid.method.startswith("percentile bootstrap")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=0.01, max_value=10), min_size=5, max_size=60),
       st.floats(min_value=0.1, max_value=10))
def test_scaling_the_samples_scales_the_interval(times: list[float], factor: float) -> None:
    base, scaled = bootstrap(times, resamples=200), bootstrap([t * factor for t in times], resamples=200)
    assert base is not None and scaled is not None
    assert scaled.low == pytest.approx(base.low * factor, rel=1e-9)
    assert scaled.high == pytest.approx(base.high * factor, rel=1e-9)
