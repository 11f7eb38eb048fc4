"""The training-loss plot written beside each checkpoint (``training_curve.png``)."""

from __future__ import annotations

import math
from pathlib import Path


def plot_curve(curve: dict, path: Path, width: int = 720, height: int = 400) -> None:
    """A PNG of the training loss (log scale) drawn with PIL."""
    from PIL import Image, ImageDraw

    steps, losses = curve["step"], curve["loss_ema"]
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    left, right, top, bottom = 60, width - 20, 30, height - 40
    d.rectangle([left, top, right, bottom], outline="black")
    d.text((left, 8), "training loss (EMA, log scale) vs step", fill="black")
    if len(steps) >= 2:
        lo = math.log10(max(1e-4, min(losses)))
        hi = math.log10(max(losses))
        hi = hi if hi > lo else lo + 1
        x = lambda s: left + (right - left) * s / max(steps[-1], 1)  # noqa: E731
        y = lambda v: bottom - (bottom - top) * (math.log10(max(v, 1e-4)) - lo) / (hi - lo)  # noqa: E731
        for e in range(math.floor(lo), math.ceil(hi) + 1):
            for m in (1, 2, 5):
                v = m * 10**e
                if lo <= math.log10(v) <= hi:
                    d.line([left, y(v), right, y(v)], fill=(225, 225, 225))
                    d.text((5, y(v) - 6), f"{v:g}", fill="black")
        d.line([(x(s), y(v)) for s, v in zip(steps, losses)], fill=(30, 70, 230), width=2)
        d.text((right - 60, bottom + 8), f"{steps[-1]}", fill="black")
    d.text((left, bottom + 8), "0", fill="black")
    img.save(path)
