"""Benchmark statistics over per-image wall times (milliseconds).

The rules:
- p95 is nearest-rank, the ceil(0.95 n)-th smallest of n samples (no interpolation, so it is
  always one of the measured values).
- batching on and off are measured in the same binary with alternating inputs, so image i of
  the "on" row and image i of the "off" row form a pair; the on/off speedup is the median of
  the paired per-image ratios off[i] / on[i], and its spread is their interquartile range (so
  the speedup always lies inside its own IQR).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.errors import Sam3dError


class StatsError(Sam3dError, ValueError):
    pass


def _values(samples: Sequence[float], what: str = "samples") -> list[float]:
    xs = [float(x) for x in samples]
    if not xs:
        raise StatsError(f"no {what}: statistics need at least one sample")
    bad = [x for x in xs if not math.isfinite(x)]
    if bad:
        raise StatsError(f"{what} contain non-finite values {bad[:3]}; every sample must be a finite number of ms")
    return xs


def nearest_rank(samples: Sequence[float], percent: int) -> float:
    """Nearest-rank percentile: the ceil(percent/100 * n)-th smallest sample (1-based rank,
    at least 1). Computed in integers, so 95 % of n = 20 is rank 19 exactly, never 20 by
    floating-point rounding."""
    xs = sorted(_values(samples))
    if not 0 < percent <= 100:
        raise StatsError(f"percent must be in (0, 100], got {percent}")
    rank = max(1, -(-percent * len(xs) // 100))  # ceil(percent * n / 100)
    return xs[rank - 1]


def median(samples: Sequence[float]) -> float:
    """Median in ms (the mean of the two middle samples when n is even)."""
    return float(np.median(_values(samples)))


def p95(samples: Sequence[float]) -> float:
    """95th percentile in ms, nearest-rank: the ceil(0.95 n)-th smallest sample.
    n = 1..20 gives ranks 1, 2, ..., 19, 19; n = 21 gives rank 20."""
    return nearest_rank(samples, 95)


def quartiles(samples: Sequence[float]) -> tuple[float, float]:
    """(25th, 75th) percentiles with numpy's default linear interpolation
    (numpy.percentile, method="linear": the value at position q (n - 1) of the sorted samples,
    interpolated between neighbours)."""
    q25, q75 = np.percentile(_values(samples), [25, 75])
    return float(q25), float(q75)


@dataclass(frozen=True)
class Summary:
    """The timing summary of one table row; all times in ms."""

    n: int
    median: float
    p95: float
    min: float
    max: float
    q25: float
    q75: float


def summarize(samples: Sequence[float]) -> Summary:
    """n, median, nearest-rank p95, min, max and the linear-interpolated quartiles, in ms."""
    xs = _values(samples)
    q25, q75 = quartiles(xs)
    return Summary(n=len(xs), median=median(xs), p95=p95(xs), min=min(xs), max=max(xs), q25=q25, q75=q75)


@dataclass(frozen=True)
class Speedup:
    """On/off speedup: ratio = the median of the paired per-image ratios off[i] / on[i] of wall
    ms (> 1 means batching on is faster); iqr_low/iqr_high: their 25th/75th percentiles
    (numpy's default linear method); n: the number of pairs."""

    ratio: float
    iqr_low: float
    iqr_high: float
    n: int

    def __str__(self) -> str:
        return f"{self.ratio:.2f}x (IQR {self.iqr_low:.2f}-{self.iqr_high:.2f})"


def paired_ratios(off_ms: Sequence[float], on_ms: Sequence[float]) -> list[float]:
    """off[i] / on[i] for each image i (both lists in the same image order)."""
    off = _values(off_ms, "off samples")
    on = _values(on_ms, "on samples")
    if len(off) != len(on):
        raise StatsError(
            f"on/off speedup needs paired samples: {len(off)} off vs {len(on)} on; both modes must time the same images"
        )
    if any(x <= 0 for x in on):
        raise StatsError("on samples must be > 0 ms to form off/on ratios")
    return [a / b for a, b in zip(off, on)]


def speedup(off_ms: Sequence[float], on_ms: Sequence[float]) -> Speedup:
    """The median of the per-image ratios off[i] / on[i] in wall ms, with their interquartile
    range (25th-75th percentile, numpy's default linear method). The lists pair by position:
    element i of each is the same image (on and off run in the same binary with the same
    alternating inputs)."""
    ratios = paired_ratios(off_ms, on_ms)
    lo, hi = quartiles(ratios)
    return Speedup(ratio=median(ratios), iqr_low=lo, iqr_high=hi, n=len(ratios))


@dataclass(frozen=True)
class Change:
    """Run B against run A: ratio = median(B) / median(A) of the per-image wall ms; p: the
    two-sided Mann-Whitney U test's p-value (scipy.stats.mannwhitneyu) that the two runs' samples
    come from the same distribution; verdict: "slower" or "faster" when p < alpha and the ratio
    differs from 1 by at least min_effect, else "no change" (equal medians too, with a minimum
    effect of 0: B is then neither slower nor faster)."""

    ratio: float
    p: float
    verdict: str


def change(a_ms: Sequence[float], b_ms: Sequence[float], *, min_effect: float = 0.05, alpha: float = 0.05) -> Change:
    """The Change of run B against run A (see Change): a significant difference (Mann-Whitney U,
    two-sided, p < alpha) that is also at least ``min_effect`` (a share of median(A); 0.05 = 5 %)
    is "slower" or "faster"; anything else is "no change"."""
    a, b = _values(a_ms, "A samples"), _values(b_ms, "B samples")
    ma = median(a)
    if ma <= 0:
        raise StatsError("median(A) must be > 0 ms to form a ratio")
    ratio = median(b) / ma
    from scipy.stats import mannwhitneyu  # 0.6 s to import: only the comparisons need it

    p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue) if a != b else 1.0
    verdict = "no change"
    if p < alpha and abs(ratio - 1.0) >= min_effect and ratio != 1.0:
        verdict = "slower" if ratio > 1.0 else "faster"
    return Change(ratio=ratio, p=p, verdict=verdict)
