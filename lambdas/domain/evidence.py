"""How sure a figure is: bootstrap intervals over measured steps, and a two one-sided test (TOST) of equivalence.

A trial's verdict compares two tracks whose per-step times move with machine load (a shared host, a noisy
neighbour, a stand-in on a laptop), so a single median can put Trainium2 on either side of the GPU from one run to
the next. Every timing figure the verdict uses therefore comes with an interval:

* **Bootstrap** (percentile method, Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13): resample the
  steady-state step times with replacement, take the statistic (the median) of each resample, and read the interval
  off the resampled statistics' quantiles. For a ratio of two tracks, each track is resampled independently and
  the ratio taken per resample. The generator is seeded, so the same measurements give the same interval.
* **TOST** (Schuirmann 1987): the trial's quality is equivalent when the mean relative difference of the evaluation
  losses at the shared eval points lies inside ``(-margin, +margin)``, shown by rejecting both one-sided nulls
  ``mean <= -margin`` and ``mean >= +margin`` at level alpha with Student's t; equivalently the ``1 - 2 alpha``
  confidence interval of the mean lies inside the margin.

Pure Python (the functions run in Lambda, whose dependencies stay small): Student's t distribution comes from the
regularized incomplete beta function (Numerical Recipes, 3rd ed., section 6.4, continued fraction).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from lambdas.domain.json_types import JsonObject

RESAMPLES = 2000
CONFIDENCE = 0.95
ALPHA = 0.05  # TOST level: each one-sided test at 5 %, so a 90 % interval inside the margin
SEED = 20261205
MIN_SAMPLES = 5  # fewer steady steps than this give no interval (the report says "too few steps")


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    samples: int
    confidence: float = CONFIDENCE
    method: str = "percentile bootstrap of the median"

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


def bootstrap(samples: Sequence[float], statistic: Callable[[Sequence[float]], float] = statistics.median, *,
              resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED) -> Interval | None:
    """Percentile bootstrap interval of ``statistic`` over ``samples``; None with fewer than MIN_SAMPLES."""
    values = [float(v) for v in samples if v is not None and math.isfinite(v)]
    if len(values) < MIN_SAMPLES:
        return None
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(statistic(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return Interval(statistic(values), _quantile(stats, tail), _quantile(stats, 1 - tail), n, confidence)


def ratio_bootstrap(numerator: Sequence[float], denominator: Sequence[float], *, scale: float = 1.0,
                    resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                    seed: int = SEED) -> Interval | None:
    """Interval of ``scale * median(numerator) / median(denominator)``, each side resampled on its own."""
    a = [float(v) for v in numerator if v is not None and math.isfinite(v)]
    b = [float(v) for v in denominator if v is not None and math.isfinite(v)]
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES or statistics.median(b) <= 0:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        bottom = statistics.median(rng.choices(b, k=len(b)))
        if bottom > 0:
            ratios.append(scale * statistics.median(rng.choices(a, k=len(a))) / bottom)
    ratios.sort()
    tail = (1 - confidence) / 2
    return Interval(scale * statistics.median(a) / statistics.median(b), _quantile(ratios, tail),
                    _quantile(ratios, 1 - tail), min(len(a), len(b)), confidence,
                    "percentile bootstrap of the ratio of medians, each track resampled on its own")


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
    """The t with P(T <= t) = p (bisection on the CDF; the report needs a handful)."""
    low, high = -1e3, 1e3
    for _ in range(200):
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
