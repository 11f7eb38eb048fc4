"""How it works tab: a short walkthrough shown more than told: the example's step plays
(draft, verify, accept), its tree attention mask is drawn, and one node's fusion is a chart;
a last section explains sampling (draw, then match) on a shipped example and curve
(``app.presenters.sampling_curve``: measured by a script, only read here).

The illustration is a real trace, decoded on demand with the session's model: RECAP
with a fresh memory on example image A, then on image B (same question), so the trees
of the second request show all three memories at work. It is not added to the
session's runs and does not touch the session's memories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

import recap

from ..boundary.errors import UserError
from ..boundary.guard import decode_queue, guarded, long_job
from ..boundary.validation import as_int
from ..presenters.fusion import fusion_figure, inspect_node, telling_node
from ..presenters.mask import EXPLANATION, mask_figure, prefix_length
from ..presenters.play import play_figure
from ..presenters.sampling_curve import curve_figure, example_markdown, load_curve
from ..presenters.text import error_markdown, md_text
from ..presenters.tree import ORIGIN_COLORS, empty_figure, origin_label
from ..state.decoding import decode_to_end, session_model
from ..state.memories import MemorySlot
from ..state.requests import open_image
from ..state.runs import Run
from ..state.session import Session
from ..state.settings import DEFAULT_METHOD, PAPER_URL, Settings
from ..state.steps import find_step, telling_step
from ..widgets.anim import AnimatedPlot, figure_json
from ..widgets.components import loose
from ..widgets.records import KEEP, Record

MAX_NEW = 40
BUDGET = 16


def legend_markdown() -> str:
    items = [
        f"<span style='color:{colour}'>●</span> {origin_label(o)}" for o, colour in ORIGIN_COLORS.items()
    ]
    return (
        " · ".join(items)
        + " · <span style='color:#dc2626'>★</span> bonus token · thick yellow: accepted path"
    )


INTRO = f"""
## How RECAP decodes

RECAP ([paper]({PAPER_URL})) makes a vision-language model answer in fewer steps **without changing a
single output token**, and with no draft model: it recycles the model's own earlier predictions.
The example below is real: RECAP with a fresh memory on example image A, then image B with the same
question (budget {BUDGET} nodes); the pictures are of the second request. Node colours:
"""

PLAY_TEXT = """
### Draft, verify, accept: press play

**Draft**: from the last accepted token (the root) a drafter grows a tree of guesses, most promising
first. **Verify**: the target reads the whole tree in one forward pass and says, at every node, which
token it wants next. **Accept**: from the root, follow the children that match; at the end the
target's own next token comes free (the red star, the *bonus*). Every kept token is the target's
greedy choice after the exact text before it, so the output is what plain greedy decoding gives:
**lossless**.
"""

MASK_TEXT = """
### Why one pass is enough: the tree attention mask
"""

FUSION_TEXT = """
### Where the guesses come from: three memories, fused

Every position the target evaluates (prompt and every tree node, rejected ones too) leaves its
top-k next tokens in memory, under three keys: **M1** the last token (kept across requests),
**M2** the last two, **M3** the last three (this request only, so about *this* image). For a
context, the entries found are mixed with weight `s(n) × (c + eps)`: longer keys and confident
(low-entropy) lists count more. Below: one node of the step, each memory's list, and the mix.
"""

ALIASING_TEXT = """
### Aliasing

M1 remembers what followed a token *last time*, under whatever image that was: after "A large" it
may propose image A's "red" on image B. Verification rejects it (no harm to the output, a wasted
guess); M2 and M3, written on this image, know better and weigh more. The **Aliasing** tab lists
every such state of your runs; its guided demo runs exactly this A-then-B scenario.
"""


SAMPLING_TEXT = """
### Sampling, still lossless: draw, then match

With a temperature (top-p, top-k) the model has no one right token: it has a distribution, and
`generate(do_sample=True)` draws from it. RECAP keeps that exact with one rule. At the root the target
**draws** a token from its own distribution there (processed exactly as `generate()` processes it). If
the draw is one of the drafted children, the walk moves into that child and draws again; the first draw
that names no child is the bonus, and the step ends. So every emitted token is a draw from the model's
distribution after the exact text before it: the drafter decides how far a step gets, never which token
comes out. With one seed the draws are the same random numbers in the same order, so the tokens are the
same too: **Compare** with sampling on shows every method writing one text. A drafted child is accepted
with exactly its probability under the target, the number the tree's hover and the inspector show.
"""

CURVE_TEXT = """
Heat flattens the distribution, so a draw lands on a drafted child less often and steps get shorter.
The embedded model is very sure of itself: acceptance barely moves until the temperature is well above
1, then falls towards one token per step (measured once, shipped with the app:
`python scripts/sampling_curve.py`).
"""


def build_example(session: Session, settings: Settings) -> Run:
    pair = {e.get("pair"): e for e in settings.examples if e.get("pair")}
    first = pair.get("A") or (settings.examples[0] if settings.examples else None)
    second = pair.get("B") or first
    if first is None:
        raise UserError("no example images in assets/examples/")
    model = session_model(session, settings)
    config = recap.RecapConfig(budget=BUDGET, scoped_memory=True)
    slot = MemorySlot(recap.TokenMemory(model.target.vocab_size, config.top_k))
    runs = [
        decode_to_end(
            session,
            settings,
            open_image(entry["path"], settings),
            entry["prompt"],
            DEFAULT_METHOD.name,
            min(MAX_NEW, settings.max_new_tokens),
            config=config,
            memory_slot=slot,
            model=model,
            source="walkthrough",
            label="walkthrough example",
            add=False,
        )
        for entry in (first, second)
    ]
    return runs[-1]


PRESS = "Press the button to decode the example."


@dataclass
class HowView(Record):
    """The walkthrough's example: what was decoded, its step slider, the step's play, mask and fusion."""

    summary: gr.Markdown | str = KEEP
    step: gr.Slider = KEEP
    # an AnimatedPlot; its value: the play's figure as JSON (``app.widgets.anim.figure_json``)
    play: gr.HTML | str = KEEP
    mask: gr.Plot | go.Figure = KEEP
    fusion: gr.Plot | go.Figure = KEEP


def step_views(run: Run | None, step: Any) -> HowView:
    """The example's pictures for one step: its play, its attention mask, one node's fusion."""
    if run is None or not run.trace.steps:
        return HowView(play="", mask=empty_figure(PRESS, height=200), fusion=empty_figure(PRESS, height=200))
    st = find_step(run.trace, as_int("step", step or 1))
    node = telling_node(st)
    return HowView(
        play=figure_json(play_figure(st)),
        mask=mask_figure(st, prefix=prefix_length(run.trace, st), selected=node),
        fusion=fusion_figure(inspect_node(st, node)),
    )


class HowTab:
    """Layout, handlers and wiring of the How it works tab."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def failed_example(self, message: str) -> list[Any]:
        return HowView(summary=error_markdown(message)).to(self.ui)

    def build_example(self, session: Session):
        """Decode the example once per session (on opening the tab or the button), then show it (a long
        job)."""
        if session.walkthrough is None:
            session.walkthrough = build_example(session, self.settings)
        run = session.walkthrough
        n = len(run.trace.steps)
        best = telling_step(run.trace) or 1
        view = step_views(run, best)
        view.summary = (
            f"Decoded: “{md_text(run.trace.text)}” in {n} steps ({run.trace.mat:.2f} tokens per step). "
            f"Showing step {best}, the one with the longest accepted path; move the slider to see others."
        )
        view.step = gr.Slider(minimum=1, maximum=max(n, 2), value=best, step=1, interactive=n > 1)
        return view.to(self.ui)

    def show(self, session: Session, step: Any):
        return step_views(session.walkthrough, step).to(self.ui)

    def build(self, tab: gr.Tab, session: gr.State) -> None:
        """The tab's components and events (call inside ``gr.Tab``; ``tab`` is that tab)."""
        gr.Markdown(INTRO)
        gr.HTML(legend_markdown())
        walk_btn = gr.Button("Decode the example", elem_id="recap-walk-run")
        summary = gr.Markdown()
        step = loose(
            gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False, elem_id="recap-walk-step")
        )
        gr.Markdown(PLAY_TEXT)
        play = AnimatedPlot(elem_id="recap-walk-tree")
        gr.Markdown(MASK_TEXT)
        with gr.Row():
            mask = gr.Plot(
                empty_figure(PRESS, height=200), show_label=False, elem_id="recap-walk-mask", scale=3
            )
            gr.Markdown(EXPLANATION + " Highlighted: the node whose fusion is drawn below (its row: what it "
                        "sees; yellow: the nodes that see it).", scale=2)
        gr.Markdown(FUSION_TEXT)
        fusion = gr.Plot(empty_figure(PRESS, height=200), show_label=False, elem_id="recap-walk-fusion")
        gr.Markdown(ALIASING_TEXT)
        curve = load_curve()
        gr.Markdown(SAMPLING_TEXT)
        gr.Markdown(example_markdown(curve), elem_id="recap-walk-sampling-example")
        gr.Markdown(CURVE_TEXT)
        gr.Plot(curve_figure(curve), show_label=False, elem_id="recap-walk-sampling-curve")
        self.ui = HowView(summary=summary, step=step, play=play, mask=mask, fusion=fusion)
        gr.on(
            [tab.select, walk_btn.click],
            long_job(self.failed_example)(self.build_example),
            [session],
            self.ui.outputs(),
            api_visibility="private",
            trigger_mode="once",
            **decode_queue(self.settings.concurrency),
        )
        step.input(guarded(self.show), [session, step], self.ui.outputs(), api_visibility="private",
                   trigger_mode="always_last")
