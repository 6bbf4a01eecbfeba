"""Turning measurements into the printed table, the JSON file and an SVG bar chart.

Every throughput figure is shown next to a ratio to its baseline from the same run: these machines
are shared and noisy, so absolute rates move between runs while ratios mostly do not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape


@dataclass
class Figure:
    """One throughput measurement: what moved, in how long, using how much CPU."""

    name: str
    group: str
    records: int
    bytes: int
    seconds: float
    cpu_seconds: float | None = None
    baseline: str | None = None
    ratio: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def mb_per_cpu_s(self) -> float | None:
        if not self.cpu_seconds:
            return None
        return self.bytes / self.cpu_seconds / 1e6

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            records_per_s=round(self.records_per_s, 1),
            mb_per_s=round(self.mb_per_s, 2),
            mb_per_cpu_s=None if self.mb_per_cpu_s is None else round(self.mb_per_cpu_s, 2),
        )
        return out


def apply_ratios(figures: Sequence[Figure]) -> None:
    """Fill ``ratio`` = rate / baseline's rate, for figures that name a baseline."""
    by_name = {f.name: f for f in figures}
    for fig in figures:
        base = by_name.get(fig.baseline or "")
        if base is not None and base.records_per_s > 0:
            fig.ratio = fig.records_per_s / base.records_per_s


def render_table(figures: Sequence[Figure]) -> str:
    """A Markdown table (it reads fine in a terminal too)."""
    lines = [
        "| measurement | records | MB | s | records/s | MB/s | MB/CPU-s | vs baseline |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for f in figures:
        ratio = f"{f.ratio:.2f} x {f.baseline}" if f.ratio is not None else "baseline"
        cpu = f"{f.mb_per_cpu_s:.0f}" if f.mb_per_cpu_s is not None else "-"
        lines.append(
            f"| {f.name} | {f.records:,} | {f.bytes / 1e6:.0f} | {f.seconds:.2f} | "
            f"{f.records_per_s:,.0f} | {f.mb_per_s:.1f} | {cpu} | {ratio} |"
        )
    return "\n".join(lines)


def latency_table(rows: Sequence[tuple[str, str]]) -> str:
    lines = ["| overhead / latency | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def svg_bars(figures: Sequence[Figure], title: str) -> str:
    """Horizontal bars of MB/s, one per figure, with the ratio written next to each bar."""
    shown = [f for f in figures if f.seconds > 0]
    width, left, bar_h, gap, top = 900, 330, 18, 6, 40
    height = top + len(shown) * (bar_h + gap) + 30
    peak = max((f.mb_per_s for f in shown), default=1.0) or 1.0
    scale = (width - left - 170) / peak
    palette = {"limit": "#7f8c8d", "baseline": "#2980b9", "project": "#27ae60", "hudi": "#8e44ad"}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="22" font-size="15" font-weight="bold">{escape(title)}</text>',
    ]
    for i, f in enumerate(shown):
        y = top + i * (bar_h + gap)
        w = max(1.0, f.mb_per_s * scale)
        color = palette.get(f.group, "#34495e")
        label = f"{f.mb_per_s:.1f} MB/s"
        if f.ratio is not None:
            label += f"  ({f.ratio:.2f} x {f.baseline})"
        parts += [
            f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">{escape(f.name)}</text>',
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}"/>',
            f'<text x="{left + w + 6:.1f}" y="{y + 13}">{escape(label)}</text>',
        ]
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
