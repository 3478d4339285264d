"""How sure a figure is: intervals over measured steps that hold across repeated runs, and a two one-sided test
(TOST) of equivalence.

A trial's verdict compares two tracks whose per-step times move with machine load (a shared host, a noisy
neighbour, a stand-in on a laptop), so a single median can put Trainium2 on either side of the GPU from one run to
the next. Every timing figure the verdict uses therefore comes with an interval, and the interval has to cover what
a repeat of the run would measure, not only what this run's steps would give if they were independent draws.

Step times are not independent draws: load drifts slowly (consecutive steps are correlated), spikes come in bursts,
and a host is a little faster or slower than the next one. An i.i.d. percentile bootstrap (Efron & Tibshirani,
*An Introduction to the Bootstrap*, ch. 13) treats 300 correlated steps as 300 independent ones; three identical
rehearsals gave cost ratios of 0.15x [0.08-0.21], 0.32x [0.21-0.47] and 0.21x [0.10-0.34], the first two disjoint.
So each interval is a Student-t interval of the median (on the log scale: load is multiplicative) whose standard
error is the sum, in quadrature, of

* **the within-run spread**, the larger of two estimates that respect the step order:
  - a *circular block bootstrap* (Politis & Romano 1992, the circular form of Künsch's 1989 moving-block
    bootstrap): resample whole runs of consecutive steps, wrapping at the end so every step is drawn equally often,
    and take the standard deviation of the resampled medians. The block length is Politis & White's (2004)
    data-driven choice with Patton, Politis & White's (2009) correction, computed on the ranks of the step times
    so that a spike does not pass for dependence;
  - *batch medians* (Schmeiser 1982; Alexopoulos & Seila, *Handbook of Simulation*, 1998, ch. 7): the medians of
    5 contiguous windows, whose spread over sqrt(5) is the standard error, with 4 degrees of freedom. The block
    bootstrap alone is not enough: its block length minimises the error of a variance estimate, and in a few hundred
    steps of slowly drifting load it is shorter than the drift, so it sees too little of it; a few long windows see
    the drift directly, and Student's t with their few degrees of freedom pays for how little they are. The
    interval uses the larger of the two standard errors and the batches' degrees of freedom (under 20 steps there
    are no batches: the block bootstrap alone, with one degree of freedom per block less one);
* **a run-to-run allowance** of ``RUN_SPREAD`` (2 % of the median, one standard deviation, per track). Nothing
  inside one run shows how much faster or slower the next host is, so this part is an assumption, not an estimate:
  Sinha et al. ("Not All GPUs Are Created Equal", SC 2022) measured an 8 % average performance variation between
  GPUs of one SKU, and a 2 % standard deviation puts a band about that wide (+-1.96 x 2 %) around each track. It
  enters as a component with no sampling error (Satterthwaite 1946 for the degrees of freedom).

For a ratio of two tracks (different hosts, independent), the log standard errors add in quadrature and the degrees
of freedom follow Welch-Satterthwaite. Every generator is seeded, so the same measurements give the same interval.

The noise harness (``tests/unit/domain/test_noise_harness.py``) checks the claim: identical simulated runs with
log-AR(1) load (persistence 0.95 a step, 6 %), 2 % host offsets, 2 % jitter and heavy-tailed spikes, a few hundred
steps each. Over 300 such runs these intervals contained the pooled median in 91-93 % of runs (GPU, Trainium2,
ratio) and the i.i.d. bootstrap's in 21-24 %; 99 % with no host offsets; 83-86 % with persistence 0.98, whose drift
(a half-life of 34 steps) is a tenth of the run: a run that short cannot show its own drift, and only more steps
or more runs tighten that. ``method="iid"`` keeps the former i.i.d. percentile bootstrap, which the harness must
see fail.

* **TOST** (Schuirmann 1987): the trial's quality is equivalent when the mean relative difference of the evaluation
  losses at the shared eval points lies inside ``(-margin, +margin)``, shown by rejecting both one-sided nulls
  ``mean <= -margin`` and ``mean >= +margin`` at level alpha with Student's t; equivalently the ``1 - 2 alpha``
  confidence interval of the mean lies inside the margin.

Pure Python (the functions run in Lambda, whose dependencies stay small): Student's t distribution comes from the
regularized incomplete beta function (Numerical Recipes, 3rd ed., section 6.4, continued fraction).
"""

from __future__ import annotations

import math
import operator
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from itertools import chain
from statistics import NormalDist
from typing import Literal

from lambdas.domain.json_types import JsonObject

RESAMPLES = 2000  # percentile bootstrap (method="iid"): its 2.5 % and 97.5 % quantiles need thousands
BLOCK_RESAMPLES = 200  # block bootstrap: a standard error, for which 200 resamples suffice (Efron & Tibshirani 6.4)
BATCHES = 5  # contiguous windows for batch medians: few and long, so each spans the load's drift
MIN_BATCH_STEPS = 4  # under BATCHES x this many steps, no batches: the block bootstrap alone
RUN_SPREAD = 0.02  # run-to-run allowance: one standard deviation of a track's median between hosts, relative
CONFIDENCE = 0.95
ALPHA = 0.05  # TOST level: each one-sided test at 5 %, so a 90 % interval inside the margin
SEED = 20261205
MIN_SAMPLES = 5  # fewer steady steps than this give no interval (the report says "too few steps")
MAX_DF = 1000.0  # Student's t with more degrees of freedom than this is the normal distribution to 3 digits

Method = Literal["block", "iid"]
IID_METHOD = "percentile bootstrap of the median, steps resampled independently"


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    samples: int
    confidence: float = CONFIDENCE
    method: str = IID_METHOD

    def as_json(self, digits: int = 6) -> JsonObject:
        out = asdict(self)
        for name in ("estimate", "low", "high"):
            out[name] = round(out[name], digits)
        return out

    def scaled(self, factor: float, method: str | None = None) -> Interval:
        low, high = sorted((self.low * factor, self.high * factor))
        return Interval(self.estimate * factor, low, high, self.samples, self.confidence, method or self.method)

    def inverted(self, numerator: float, method: str | None = None) -> Interval:
        """``numerator / x`` over the interval (a rate from a time): the bounds swap."""
        return Interval(numerator / self.estimate, numerator / self.high, numerator / self.low, self.samples,
                        self.confidence, method or self.method)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (the "inclusive" definition numpy calls linear)."""
    position = q * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def _finite(samples: Sequence[float]) -> list[float]:
    return [float(v) for v in samples if v is not None and math.isfinite(v)]


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks with ties averaged, so a run of equal times carries no false trend."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            ranks[i] = (start + end) / 2
        start = end + 1
    return ranks


def block_length(values: Sequence[float]) -> int:
    """The circular block bootstrap's block length, in steps: Politis & White (2004), "Automatic block-length
    selection for the dependent bootstrap", with the correction of Patton, Politis & White (2009).

    The autocorrelations are of the ranks (spikes would otherwise dominate them). ``m`` is the first lag after which
    ``K_n = max(5, sqrt(log10 n))`` autocorrelations in a row are insignificant at ``2 sqrt(log10 n / n)``; the
    flat-top lag window over ``2 m`` lags estimates ``G = sum |k| R(k)`` and the long-run variance ``g``, and
    ``b = (2 G^2 / D_CB)^(1/3) n^(1/3)`` with ``D_CB = 4/3 g^2``, capped at ``min(3 sqrt(n), n / 3)``.

    The floor is ``n^(1/3)``, the order of the best block length for a variance (Hall, Horowitz & Jing 1995): a
    short series can hide dependence from its autocorrelations, and a longer block costs a little precision where
    there is none, never bias.
    """
    n = len(values)
    ranks = _ranks(values)
    mean = statistics.fmean(ranks)
    centred = [r - mean for r in ranks]
    k_n = max(5, math.ceil(math.sqrt(math.log10(n))))
    lags = min(math.ceil(math.sqrt(n)) + k_n, n - 1)
    acv = [sum(map(operator.mul, centred, centred[k:])) / n for k in range(lags + 1)]
    if acv[0] <= 0:
        return 1
    bound = 2 * math.sqrt(math.log10(n) / n)
    insignificant = [abs(a / acv[0]) < bound for a in acv]
    first = next((m for m in range(lags - k_n + 1) if all(insignificant[m + 1:m + 1 + k_n])), None)
    window = lags if first is None else min(2 * max(first, 1), lags)
    g = big_g = 0.0
    for k in range(1, window + 1):
        weight = 1.0 if k / window <= 0.5 else 2 * (1 - k / window)
        g += 2 * weight * acv[k]
        big_g += 2 * weight * k * acv[k]
    g += acv[0]
    floor = max(1, round(math.cbrt(n)))
    if g <= 0:  # the lag window's long-run variance can dip below zero: no estimate, the floor
        return floor
    length = math.cbrt(2 * big_g * big_g / (4 / 3 * g * g) * n)
    return max(floor, min(round(length), math.ceil(min(3 * math.sqrt(n), n / 3))))


def _block_resample(values: Sequence[float], block: int, rng: random.Random) -> list[float]:
    """One circular-block-bootstrap resample: blocks of ``block`` consecutive steps from uniform starts, wrapping
    past the last step, cut to the series' length."""
    n = len(values)
    if block <= 1:
        return rng.choices(values, k=n)
    wrapped = [*values, *values[:block - 1]]
    starts = [int(rng.random() * n) for _ in range(-(-n // block))]
    out = list(chain.from_iterable(map(wrapped.__getitem__, map(slice, starts, [s + block for s in starts]))))
    del out[n:]
    return out


@dataclass(frozen=True)
class _Spread:
    """A statistic and its within-run standard error, on the log scale where ``log`` (every sample positive)."""

    estimate: float
    se: float
    df: float
    block: int
    batches: int
    log: bool


@lru_cache(maxsize=16)
def _spread(values: tuple[float, ...], statistic: Callable[[Sequence[float]], float], resamples: int,
            seed: int) -> _Spread:
    """Cached: a report bounds each track's step time and then the ratio of the same tracks."""
    n = len(values)
    estimate = statistic(values)
    log = estimate > 0 and all(v > 0 for v in values)
    scale: Callable[[float], float] = math.log if log else float
    block = block_length(values)
    rng = random.Random(seed)
    se = statistics.stdev(scale(statistic(_block_resample(values, block, rng))) for _ in range(max(2, resamples)))
    df = max(1.0, n / block - 1)  # as many independent pieces as blocks
    batches = BATCHES if n >= BATCHES * MIN_BATCH_STEPS else 0
    if batches:
        windows = [scale(statistic(values[i * n // batches:(i + 1) * n // batches])) for i in range(batches)]
        se = max(se, statistics.stdev(windows) / math.sqrt(batches))
        df = batches - 1
    return _Spread(scale(estimate), se, df, block, batches, log)


def _t_half_width(parts: Sequence[tuple[float, float]], fixed: float, confidence: float) -> float:
    """Student-t half-width for a sum of independent variance components: ``parts`` are (standard error, degrees of
    freedom), ``fixed`` a standard error known without sampling error; Welch-Satterthwaite degrees of freedom."""
    variance = sum(se * se for se, _ in parts) + fixed * fixed
    if variance == 0:
        return 0.0
    weighted = sum(se ** 4 / df for se, df in parts)
    df = MAX_DF if weighted == 0 else min(MAX_DF, variance * variance / weighted)
    return t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(variance)


def _describe(spreads: Sequence[_Spread], run_spread: float) -> str:
    """The method as the report shows it, with the data-driven choices (one figure per track, in order)."""
    blocks = "/".join(str(s.block) for s in spreads)
    batches = "/".join(str(s.batches) if s.batches else "no" for s in spreads)
    return (f"the larger spread of a circular block bootstrap ({blocks}-step blocks) and {batches} batch medians, "
            f"plus {run_spread:.0%} run-to-run")


def bootstrap(samples: Sequence[float], statistic: Callable[[Sequence[float]], float] = statistics.median, *,
              resamples: int | None = None, confidence: float = CONFIDENCE, seed: int = SEED,
              method: Method = "block", run_spread: float = RUN_SPREAD) -> Interval | None:
    """Interval of ``statistic`` (a location statistic, the median by default) over ``samples`` in step order, meant
    to cover a repeat of the run (see the module docstring); None with fewer than MIN_SAMPLES.

    ``method="iid"`` is the percentile bootstrap with every step resampled independently, which ignores the order
    and understates the uncertainty of drifting step times; ``run_spread`` is the run-to-run allowance (0: none)."""
    values = _finite(samples)
    if len(values) < MIN_SAMPLES:
        return None
    n = len(values)
    if method == "iid":
        rng = random.Random(seed)
        stats = sorted(statistic(rng.choices(values, k=n)) for _ in range(resamples or RESAMPLES))
        tail = (1 - confidence) / 2
        return Interval(statistic(values), _quantile(stats, tail), _quantile(stats, 1 - tail), n, confidence)
    spread = _spread(tuple(values), statistic, resamples or BLOCK_RESAMPLES, seed)
    allowance = run_spread if spread.log else run_spread * abs(spread.estimate)
    half = _t_half_width([(spread.se, spread.df)], allowance, confidence)
    low, high = spread.estimate - half, spread.estimate + half
    if spread.log:
        low, high = math.exp(low), math.exp(high)
    return Interval(statistic(values), low, high, n, confidence,
                    f"Student t of the {getattr(statistic, '__name__', 'statistic')} over "
                    f"{_describe([spread], run_spread)}")


def ratio_bootstrap(numerator: Sequence[float], denominator: Sequence[float], *, scale: float = 1.0,
                    resamples: int | None = None, confidence: float = CONFIDENCE, seed: int = SEED,
                    method: Method = "block", run_spread: float = RUN_SPREAD) -> Interval | None:
    """Interval of ``scale * median(numerator) / median(denominator)``, the two tracks independent (different
    hosts): each track's log standard error as in ``bootstrap``, added in quadrature with a run-to-run allowance per
    track. ``method="iid"`` is the former percentile bootstrap, each track resampled on its own step by step."""
    a, b = _finite(numerator), _finite(denominator)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES or statistics.median(b) <= 0:
        return None
    estimate = scale * statistics.median(a) / statistics.median(b)
    if method == "iid":
        rng = random.Random(seed)
        ratios = []
        for _ in range(resamples or RESAMPLES):
            bottom = statistics.median(rng.choices(b, k=len(b)))
            if bottom > 0:
                ratios.append(scale * statistics.median(rng.choices(a, k=len(a))) / bottom)
        ratios.sort()
        tail = (1 - confidence) / 2
        return Interval(estimate, _quantile(ratios, tail), _quantile(ratios, 1 - tail), min(len(a), len(b)),
                        confidence, "percentile bootstrap of the ratio of medians, each track's steps resampled "
                                    "independently")
    if statistics.median(a) <= 0:
        return None
    tracks = [_spread(tuple(track), statistics.median, resamples or BLOCK_RESAMPLES, seed) for track in (a, b)]
    # A track with a non-positive step time has its spread on the linear scale: the delta method takes it to logs.
    parts = [(s.se if s.log else s.se / s.estimate, s.df) for s in tracks]
    half = _t_half_width(parts, run_spread * math.sqrt(2), confidence)
    centre = math.log(statistics.median(a) / statistics.median(b))
    low, high = sorted((scale * math.exp(centre - half), scale * math.exp(centre + half)))
    return Interval(estimate, low, high, min(len(a), len(b)), confidence,
                    f"Student t of the log ratio of medians (Welch-Satterthwaite), each track (numerator/"
                    f"denominator) over {_describe(tracks, run_spread)}")


# ---- Student's t ------------------------------------------------------------------------------------------------
def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p: bisection on the CDF to 1e-12 (the report needs a handful); from MAX_DF degrees of
    freedom on, the normal quantile, which differs from t's by under 0.1 %."""
    if df >= MAX_DF:
        return NormalDist().inv_cdf(p)
    low, high = -1e3, 1e3
    while high - low > 1e-12:
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True)
class Equivalence:
    """TOST of the mean of ``differences`` against ``(-margin, +margin)``."""

    n: int
    mean: float | None
    margin: float
    p_lower: float | None  # H0: mean <= -margin
    p_upper: float | None  # H0: mean >= +margin
    low: float | None  # the (1 - 2 alpha) interval of the mean
    high: float | None
    alpha: float
    equivalent: bool | None  # None: too few points to test
    different: bool | None  # the interval lies wholly outside the margin
    detail: str

    def as_json(self) -> JsonObject:
        out = asdict(self)
        for name in ("mean", "p_lower", "p_upper", "low", "high"):
            if out[name] is not None:
                out[name] = round(out[name], 6)
        return out


def tost(differences: Sequence[float], margin: float, *, alpha: float = ALPHA) -> Equivalence:
    values = [float(v) for v in differences if v is not None and math.isfinite(v)]
    n = len(values)
    if n < 2 or margin <= 0:
        why = "a positive margin" if margin <= 0 else f"at least 2 shared eval points (have {n})"
        return Equivalence(n, statistics.fmean(values) if values else None, margin, None, None, None, None, alpha,
                           None, None, f"not tested: TOST needs {why}")
    mean = statistics.fmean(values)
    sd = statistics.stdev(values)
    df = n - 1
    if sd == 0:
        inside = -margin < mean < margin
        p = 0.0 if inside else 1.0
        return Equivalence(n, mean, margin, p, p, mean, mean, alpha, inside, not inside,
                           f"all {n} differences equal {mean:+.4g}: " + ("inside" if inside else "outside")
                           + f" the margin ±{margin:g}")
    se = sd / math.sqrt(n)
    p_lower = 1.0 - t_cdf((mean + margin) / se, df)
    p_upper = t_cdf((mean - margin) / se, df)
    half = t_quantile(1 - alpha, df) * se
    low, high = mean - half, mean + half
    equivalent = max(p_lower, p_upper) < alpha
    different = high <= -margin or low >= margin
    detail = (f"mean relative difference {mean:+.4f} over {n} shared eval points, {100 * (1 - 2 * alpha):.0f} % "
              f"interval [{low:+.4f}, {high:+.4f}] against the margin ±{margin:g}: "
              + ("equivalent" if equivalent else "shown different" if different else "not shown equivalent")
              + f" (TOST p = {max(p_lower, p_upper):.3g})")
    return Equivalence(n, mean, margin, p_lower, p_upper, low, high, alpha, equivalent, different, detail)
