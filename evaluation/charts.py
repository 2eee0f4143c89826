"""The reliability diagram of an evaluation (matplotlib, Agg backend): accuracy against mean
confidence in each bin, with the bins' item counts below."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

ACCURACY = "#1f77b4"
GAP = "#d62728"
NEUTRAL = "#7f7f7f"


def save_figure(figure: Figure, path: Path) -> Path:
    """Write `figure` as a PNG at `path` (its folder made) and free it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def reliability_diagram(result: dict[str, Any], path: Path) -> Path:
    bins = result["reliability"]
    m = result["metrics"]
    width = bins[0]["upper"] - bins[0]["lower"]
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(6, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    filled = [b for b in bins if b["count"]]
    top.bar(
        [b["lower"] for b in filled],
        [b["accuracy"] for b in filled],
        width=width,
        align="edge",
        color=ACCURACY,
        edgecolor="white",
        label="accuracy in bin",
    )
    top.bar(
        [b["lower"] for b in filled],
        [b["confidence"] - b["accuracy"] for b in filled],
        bottom=[b["accuracy"] for b in filled],
        width=width,
        align="edge",
        color=GAP,
        alpha=0.3,
        edgecolor=GAP,
        label="gap to mean confidence",
    )
    top.plot([0, 1], [0, 1], linestyle="--", color=NEUTRAL, label="perfect calibration")
    top.set_ylim(0, 1)
    top.set_ylabel("accuracy")
    top.set_title(
        f"Reliability: n={m['n']}, accuracy {m['accuracy']:.2f}, ECE {m['ece']:.3f}, "
        f"Brier {m['brier']:.3f}",
        fontsize=10,
    )
    top.legend(loc="upper left", fontsize=8)
    bottom.bar(
        [b["lower"] for b in bins],
        [b["count"] for b in bins],
        width=width,
        align="edge",
        color=NEUTRAL,
        edgecolor="white",
    )
    bottom.set_xlim(0, 1)
    bottom.set_xlabel("top-option probability (confidence)")
    bottom.set_ylabel("items")
    return save_figure(figure, path)
