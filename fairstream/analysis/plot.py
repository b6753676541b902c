"""The demo's plot, which ``fairstream audit --png`` draws too: dwell per tenant over time.

One panel per side (FIFO, fairstream, the ideal), each a scatter of every record's dwell
against its arrival, and below them, for the demo, the API calls started per second on each
side. matplotlib (the demo extra) is imported only here, when a plot is asked for; the one
thing this module does besides arithmetic is write the PNG where its caller says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairstream.analysis.dwell import by_noisy_first


def plot_dwell(
    path: Path,
    panels: Sequence[tuple[str, Mapping[str, list[tuple[float, float]]]]],
    t0: float,
    title: str = "Noisy neighbour: dwell time per tenant, same arrivals, same API rate",
    *,
    ylabel: str = "dwell: arrival to service start (s)",
    api: Sequence[tuple[str, list[float]]] | None = None,
    rate: float | None = None,
) -> bool:
    """Dwell time against arrival time per tenant, one panel per (title, tenant ->
    [(arrival, dwell)]), to a PNG; False when matplotlib (the demo extra) is missing.
    ``api``: (label, service start times in s from t0) per side, drawn below as API calls
    started per second beside ``rate``. Caller: the demo, and ``fairstream audit``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if api:
        fig = plt.figure(figsize=(6 * len(panels), 7.5))
        grid = fig.add_gridspec(2, len(panels), height_ratios=[3, 1.6])
        axes = [fig.add_subplot(grid[0, 0])]
        axes += [fig.add_subplot(grid[0, i], sharey=axes[0]) for i in range(1, len(panels))]
        calls = fig.add_subplot(grid[1, :])
        for label, starts in api:
            seconds = int(max(starts, default=0)) + 1
            counts = [0] * seconds
            for start in starts:
                if start >= 0:
                    counts[int(start)] += 1
            calls.step(range(seconds), counts, where="post", label=label)
        if rate is not None:
            calls.axhline(rate, color="0.4", linestyle=":", label=f"API rate {rate:g}/s")
        calls.set_xlabel("time (s)")
        calls.set_ylabel("API calls started / s")
        calls.set_title("API utilization: calls started per second")
        calls.grid(True, alpha=0.3)
        calls.legend(loc="lower left", fontsize=8)
    else:
        fig, grid_axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), sharey=True)
        axes = list(grid_axes) if len(panels) > 1 else [grid_axes]
    for ax, (panel_title, data) in zip(axes, panels, strict=True):
        for tenant in by_noisy_first(data):
            points = sorted(data[tenant])
            xs = [a - t0 for a, _ in points]
            ys = [d for _, d in points]
            style: dict[str, Any] = (
                {"color": "0.6", "s": 4, "label": "noisy (burst)"}
                if tenant == "noisy"
                else {"s": 14, "label": tenant}
            )
            ax.scatter(xs, ys, **style)
        ax.set_title(panel_title)
        ax.set_xlabel("arrival time (s)")
        ax.set_yscale("symlog", linthresh=0.1)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(ylabel)
    axes[-1].legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
