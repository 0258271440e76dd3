"""The standard chart of a load sweep: per-user tok/s against aggregate tok/s, one line per model,
each point a level; and this run's throughput, goodput and latency against the level."""

from __future__ import annotations

import pandas as pd

AGGREGATE = "aggregate tok/s (steady)"


def plot_tradeoff(tables: dict[str, pd.DataFrame]):
    """What one user gets against what the server delivers in all; a hollow point is a level whose client
    could not keep up (the client's limit, not the server's)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, table in tables.items():
        t = table.dropna(subset=[AGGREGATE, "per-user tok/s p50"])
        line, = ax.plot(t[AGGREGATE], t["per-user tok/s p50"], "-", label=label)
        kept = t[~t["saturated"]]
        ax.plot(kept[AGGREGATE], kept["per-user tok/s p50"], "o", color=line.get_color())
        marked = t[t["saturated"]]
        ax.plot(marked[AGGREGATE], marked["per-user tok/s p50"], "o", mfc="none", color=line.get_color())
        for _, row in t.iterrows():
            ax.annotate(f"{row['level']:g}", (row[AGGREGATE], row["per-user tok/s p50"]),
                        textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("aggregate output tokens per second (steady window)")
    ax.set_ylabel("per-user decode tokens per second (median)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title("Per user against in all (numbers: the level)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_levels(table: pd.DataFrame, label: str):
    """Aggregate tok/s and goodput (steady window) against the level; TTFT and TPOT, mean and the highest
    percentile chosen, beside them."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = table["level"].to_numpy(dtype=float)
    left.plot(x, table[AGGREGATE], "o-", label="aggregate tok/s (steady)")
    left.set_ylabel("output tokens per second")
    twin = left.twinx()
    twin.plot(x, table["goodput req/s (steady)"], "s--", color="tab:green", label="goodput req/s (steady)")
    twin.set_ylabel("requests per second within the SLO")
    twin.set_ylim(bottom=0)
    left.set_ylim(bottom=0)
    top = [c for c in table.columns if c.startswith("TTFT p")][-1].removeprefix("TTFT ").removesuffix(" ms")
    for metric, marker in (("TTFT", "o"), ("TPOT", "s")):
        right.plot(x, table[f"{metric} mean ms"], f"{marker}-", label=f"{metric} mean")
        right.plot(x, table[f"{metric} {top} ms"], f"{marker}--", label=f"{metric} {top}")
    right.set_ylabel("milliseconds")
    right.set_yscale("log")
    right.legend()
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.set_xlabel("requests in flight" if table["mode"].iloc[0] == "concurrency" else "requests per second")
        ax.grid(alpha=0.3)
    lines = left.get_lines() + twin.get_lines()
    left.legend(lines, [line.get_label() for line in lines], loc="upper left")
    left.set_title(f"{label}: throughput and goodput")
    right.set_title(f"{label}: latency")
    fig.tight_layout()
    return fig
