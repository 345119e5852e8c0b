"""Means over seeds (or trials) drawn with their spread, and legends that say what it is.

    mean_and_range(ax, steps, returns, label="mpo", color="C0")   # returns: (seeds, steps)

draws the mean over the first axis as a line and the band from the lowest to the highest
row, and labels the line "mpo: mean of 5 seeds, band min-max", the count read from the
data. ``range_bars(centres, values)`` is the ``yerr`` of an error bar (or a bar) from each
centre down to the lowest of its values and up to the highest; its caller's label or title
says what the centre is (a mean, a median) and over how many.
"""

import warnings

import numpy as np


def mean_and_range(ax, x, values, *, label: str, color: str, unit: str = "seeds",
                   alpha: float = 0.2, **style) -> None:
    """The mean of ``values`` (one row per seed) against ``x`` and its min-max band; NaNs
    are left out of both, and a column with no value is a gap."""
    values = np.asarray(values, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column
        mean, low, high = (np.nanmean(values, 0), np.nanmin(values, 0), np.nanmax(values, 0))
    ax.plot(x, mean, color=color, label=f"{label}: mean of {len(values)} {unit}, band min-max",
            **style)
    ax.fill_between(x, low, high, color=color, alpha=alpha, linewidth=0)


def range_bars(centres, values) -> np.ndarray:
    """``yerr`` (2, points) from each of ``centres`` to the lowest and the highest of its
    ``values`` (a sequence per point, of any length); never negative, so a mean that rounds
    a hair below its lowest value draws no bar rather than failing."""
    centres = np.asarray(centres, dtype=float)
    low = np.array([np.min(v) for v in values], dtype=float)
    high = np.array([np.max(v) for v in values], dtype=float)
    return np.clip(np.stack([centres - low, high - centres]), 0.0, None)
