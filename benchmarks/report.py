"""Figures, targets and the table ``python -m benchmarks`` prints.

Every benchmark returns a ``Section``: its ``Figure`` rows (one per target,
or per reported quantity that has none) and free-form details for the JSON.
A figure carries the bare baseline measured in the same run, so the ratio
compares two numbers taken under the same machine load.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

TargetKind = Literal["ratio_max", "ratio_min", "max", "min", "none"]


@dataclass(frozen=True, slots=True)
class Target:
    """A bound on a figure: on its ratio to the baseline, or on its value."""

    kind: TargetKind
    bound: float = 0.0
    note: str = ""

    @classmethod
    def ratio_at_most(cls, bound: float, note: str = "") -> Target:
        return cls("ratio_max", bound, note)

    @classmethod
    def ratio_at_least(cls, bound: float, note: str = "") -> Target:
        return cls("ratio_min", bound, note)

    @classmethod
    def at_most(cls, bound: float, note: str = "") -> Target:
        return cls("max", bound, note)

    @classmethod
    def at_least(cls, bound: float, note: str = "") -> Target:
        return cls("min", bound, note)

    @classmethod
    def none(cls, note: str = "") -> Target:
        return cls("none", 0.0, note)

    def describe(self, unit: str) -> str:
        if self.kind == "ratio_max":
            text = f"ratio <= {self.bound:g}"
        elif self.kind == "ratio_min":
            text = f"ratio >= {self.bound:g}"
        elif self.kind == "max":
            text = f"<= {self.bound:g} {unit}"
        elif self.kind == "min":
            text = f">= {self.bound:g} {unit}"
        else:
            text = "-"
        return f"{text} ({self.note})" if self.note else text

    def check(self, value: float, baseline: float | None) -> bool | None:
        """True (met), False (missed) or None (nothing to check)."""
        if self.kind == "none":
            return None
        if self.kind in ("max", "min"):
            return value <= self.bound if self.kind == "max" else value >= self.bound
        if baseline is None or baseline <= 0 or not math.isfinite(baseline):
            return False  # a ratio target without a usable baseline is not met
        ratio = value / baseline
        return ratio <= self.bound if self.kind == "ratio_max" else ratio >= self.bound


@dataclass(slots=True)
class Figure:
    """One row of the table: a measured value, its same-run baseline and target."""

    benchmark: str
    name: str
    value: float
    unit: str
    target: Target = field(default_factory=Target.none)
    baseline: float | None = None
    baseline_name: str | None = None

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline

    @property
    def passed(self) -> bool | None:
        return self.target.check(self.value, self.baseline)

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "benchmark": self.benchmark,
            "name": self.name,
            "value": _round(self.value),
            "unit": self.unit,
            "baseline": None if self.baseline is None else _round(self.baseline),
            "baseline_name": self.baseline_name,
            "ratio": None if ratio is None else round(ratio, 3),
            "target": self.target.describe(self.unit),
            "target_spec": asdict(self.target),
            "status": status_word(self.passed),
        }


@dataclass(slots=True)
class Section:
    """What one benchmark hands back."""

    name: str
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def add(
        self,
        name: str,
        value: float,
        unit: str,
        *,
        target: Target | None = None,
        baseline: float | None = None,
        baseline_name: str | None = None,
    ) -> Figure:
        figure = Figure(
            self.name, name, value, unit, target or Target.none(), baseline, baseline_name
        )
        self.figures.append(figure)
        return figure

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seconds": round(self.seconds, 1),
            "figures": [f.to_json() for f in self.figures],
            "details": self.details,
        }


def status_word(passed: bool | None) -> str:
    return "pass" if passed else ("-" if passed is None else "MISS")


def _round(value: float) -> float:
    if not math.isfinite(value):
        return value
    magnitude = abs(value)
    digits = 1 if magnitude >= 1000 else 2 if magnitude >= 10 else 3
    return round(value, digits)


# -- statistics --------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) by linear interpolation; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p90, p99, max and mean of a sample (same unit as the values)."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 3),
        "p90": round(percentile(values, 90), 3),
        "p99": round(percentile(values, 99), 3),
        "max": round(max(values), 3),
        "mean": round(statistics.fmean(values), 3),
    }


# -- the machine -------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """What the figures were measured on; the load average tells how busy it was."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "nproc": usable or os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "loop": "asyncio (stdlib); server: uvicorn --loop asyncio, ws websockets-sansio",
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# -- the table ---------------------------------------------------------------------


def _num(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    magnitude = abs(value)
    if magnitude >= 10_000:
        text = f"{value:,.0f}"
    elif magnitude >= 100:
        text = f"{value:.0f}"
    elif magnitude >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".rstrip()


def table(figures: Iterable[Figure]) -> str:
    """Every figure in one plain-text table."""
    header = ("benchmark", "figure", "measured", "baseline (same run)", "ratio", "target", "")
    rows = [header]
    for f in figures:
        baseline = "-"
        if f.baseline is not None:
            baseline = _num(f.baseline, f.unit)
            if f.baseline_name:
                baseline += f" [{f.baseline_name}]"
        ratio = f.ratio
        rows.append(
            (
                f.benchmark,
                f.name,
                _num(f.value, f.unit),
                baseline,
                "-" if ratio is None else f"{ratio:.2f}x",
                f.target.describe(f.unit),
                status_word(f.passed),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(figures: list[dict[str, Any]]) -> str:
    """The table of a results file (``Figure.to_json`` rows) as Markdown."""
    lines = [
        "| benchmark | figure | measured | baseline (same run) | ratio | target | |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        unit = f["unit"]
        baseline = "-"
        if f["baseline"] is not None:
            baseline = _num(f["baseline"], unit)
            if f["baseline_name"]:
                baseline += f" ({f['baseline_name']})"
        ratio = "-" if f["ratio"] is None else f"{f['ratio']:.2f}x"
        cells = [
            f["benchmark"],
            f["name"],
            _num(f["value"], unit),
            baseline,
            ratio,
            f["target"],
            "**MISS**" if f["status"] == "MISS" else f["status"],
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
