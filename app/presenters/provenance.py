"""Where a node's proposal came from: the memory rows behind it, and the requests (images) that wrote them.

Pure: a ``FusionChoice`` (``app.presenters.fusion``) -> table rows and their HTML (thumbnails
inlined as data URIs, every text escaped).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .fusion import SOURCE_NAMES, FusionChoice


@dataclass(frozen=True)
class ProvenanceRow:
    kind: str
    request: int
    step: int
    depth: int
    same_image: bool | None
    weight: float | None

    @property
    def where(self) -> str:
        if self.request < 0:
            return "this request's text (a chain, no memory row)"
        place = "prefill" if self.step == 0 else f"step {self.step}, depth {self.depth}"
        return f"request {self.request}, {place}"


def provenance_rows(choice: FusionChoice) -> list[ProvenanceRow]:
    """Where each source's row came from (one row per panel, in panel order)."""
    return [ProvenanceRow(p.kind, p.request, p.step, p.depth, p.same_image, p.weight)
            for p in (*choice.sources, *choice.chains)]


def image_data_uri(path: str | Path | None) -> str | None:
    """A small PNG as a data URI (thumbnails inline in the provenance table), or None."""
    if path is None or not Path(path).is_file():
        return None
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def provenance_html(choice: FusionChoice, thumbnail: Callable[[int], str | None] = lambda _r: None) -> str:
    """The provenance table as HTML; ``thumbnail(request)`` gives an image src for rows
    another image wrote (a data URI or URL; None: no picture)."""
    rows = []
    for r in provenance_rows(choice):
        same = {True: "same image", False: "<b>another image</b>", None: "?"}[r.same_image]
        if r.request < 0:
            same = "this request"
        pic = ""
        if r.same_image is False:
            src = thumbnail(r.request)
            if src:
                alt = f"image of request {r.request}"
                pic = f"<img src='{html.escape(src, quote=True)}' alt='{alt}' height='56'>"
        weight = "—" if r.weight is None else f"{r.weight:.2f}"
        rows.append(f"<tr><td>{html.escape(SOURCE_NAMES.get(r.kind, r.kind))}</td><td>{weight}</td>"
                    f"<td>{html.escape(r.where)}</td><td>{same}</td><td>{pic}</td></tr>")
    if not rows:
        return "<p>No source: nothing was drafted after this node.</p>"
    return ("<table class='recap-provenance'><thead><tr><th>source</th><th>weight</th><th>written at</th>"
            "<th>image</th><th></th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
