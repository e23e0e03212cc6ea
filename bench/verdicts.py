"""How ``make bench`` turns interleaved pairs into a ratio a noisy machine cannot sway: a pair
with more than OTHER_CPU_MAX_PCT other CPU, or as much steal, in one of its phases, or (end to
end) raw Celery rates either side of AwoooP's batch more than RAW_APART_MAX_PCT apart, is
measured again, up to MAX_PAIRS pairs; the ratio is the median of PAIRS counted pairs, clean
ones first, then noisy ones in the order measured, marked (bench/NOTES.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bench.report import log

PAIRS = 3
MAX_PAIRS = 4
OTHER_CPU_MAX_PCT = 5.0
RAW_APART_MAX_PCT = 20.0


@dataclass
class Pair:
    """One interleaved pair: its ratio(s) and why it is noisy (empty: clean)."""

    ratios: dict[str, float]
    reasons: list[str] = field(default_factory=list)
    counted: bool = False

    @property
    def noisy(self) -> bool:
        return bool(self.reasons)


def apart_pct(a: float, b: float) -> float:
    """How far apart two rates are, in % of their mean."""
    mean = (a + b) / 2
    return abs(a - b) / mean * 100 if mean > 0 else float("nan")


def noise_reasons(
    phases: Mapping[str, Mapping[str, float]], raw_rates: tuple[float, float] | None = None
) -> list[str]:
    """Why a pair is noisy: each phase (by name, its noise figures as
    :class:`bench.procs.Noise` writes them) above the limit of other CPU or of steal, and raw
    rates either side of AwoooP's batch too far apart (compared as printed, whole percents)."""
    reasons = [
        f"{what} {pct:.0f} % during {phase}"
        for phase, figures in phases.items()
        for what, pct in (
            ("other CPU", figures["other_cpu_pct"]),
            ("steal", figures.get("steal_cpu_pct", 0.0)),
        )
        if round(pct) > OTHER_CPU_MAX_PCT
    ]
    if raw_rates is not None:
        apart = apart_pct(*raw_rates)
        if not round(apart) <= RAW_APART_MAX_PCT:
            reasons.append(
                f"raw Celery {raw_rates[0]:.0f} then {raw_rates[1]:.0f} tasks/s "
                f"({apart:.0f} % apart)"
            )
    return reasons


def need_more(pairs: Sequence[Pair]) -> bool:
    """Whether another pair is to be measured: fewer than PAIRS clean, and room left."""
    clean = sum(1 for p in pairs if not p.noisy)
    return clean < PAIRS and len(pairs) < MAX_PAIRS


def choose(pairs: Sequence[Pair]) -> None:
    """Marks the pairs that count: the first PAIRS clean ones, then noisy ones in order."""
    for p in pairs:
        p.counted = False
    chosen = [p for p in pairs if not p.noisy][:PAIRS]
    chosen += [p for p in pairs if p.noisy][: PAIRS - len(chosen)]
    for p in chosen:
        p.counted = True


def measure_pairs(what: str, measure: Callable[[int], Pair]) -> list[Pair]:
    """``measure(k)`` for pair k = 1, 2, … until :func:`need_more` says enough (each noisy
    pair logged); the pairs, the counted ones marked (:func:`choose`)."""
    pairs: list[Pair] = []
    while need_more(pairs):
        pairs.append(pair := measure(len(pairs) + 1))
        if pair.noisy:
            log(f"{what}, pair {len(pairs)} is noisy: {'; '.join(pair.reasons)}")
    choose(pairs)
    return pairs


def median(pairs: Sequence[Pair], key: str) -> float:
    """The median of ``key`` over the counted pairs (NaN when none counted)."""
    values = [p.ratios[key] for p in pairs if p.counted and p.ratios.get(key) == p.ratios.get(key)]
    return statistics.median(values) if values else float("nan")


def describe(pairs: Sequence[Pair], what: str) -> list[str]:
    """Report lines: each pair measured again (and why), each noisy pair counted anyway."""
    lines = []
    for i, p in enumerate(pairs, 1):
        if not p.noisy:
            continue
        if p.counted:
            fate = f"counted anyway, marked (fewer than {PAIRS} clean in {len(pairs)})"
        else:
            fate = "measured again" if i < len(pairs) else "not counted"
        lines.append(f"{what}, pair {i}: {'; '.join(p.reasons)}: {fate}")
    return lines
