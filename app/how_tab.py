"""How it works tab: a short walkthrough, illustrated with the app's own tree figures.

The illustration is a real trace, decoded on demand with the session's model: RECAP
with a fresh memory on example image A, then on image B (same question), so the trees
of the second request show all three memories at work. It is not added to the
session's runs and does not touch the session's memories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

import recap
from app.figures import ORIGIN_COLORS, ORIGIN_LABELS, empty_figure, tree_figure
from app.services import (
    KEEP,
    Record,
    UserError,
    as_int,
    decode_queue,
    decode_to_end,
    gpu_handler,
    guarded,
    open_image,
    session_model,
    warn,
)
from app.session import MemorySlot, Run, Session
from app.settings import PAPER_URL, Settings
from app.views import error_markdown, find_step, md_text

MAX_NEW = 40
BUDGET = 16


def legend_markdown() -> str:
    items = [f"<span style='color:{ORIGIN_COLORS[o]}'>●</span> {ORIGIN_LABELS[o]}" for o in ORIGIN_COLORS
             if o != "template"]
    return " · ".join(items) + " · <span style='color:#dc2626'>★</span> bonus token · thick yellow: accepted path"


TEXT = f"""
## How RECAP decodes

RECAP ([paper]({PAPER_URL})) makes a vision-language model answer faster **without changing a single
output token**. It needs no draft model and no training: it recycles the target model's own earlier
predictions.

**1. Draft.** The *root* of each tree is the last token the model has accepted. From the root, a
drafter guesses several possible continuations at once, as a tree: every node is one guessed token,
and every path from the root is one guessed continuation.

**2. Verify.** The target model reads the whole tree in **one forward pass**. A tree attention mask
lets each node see the text before the root plus its own ancestors only, so at every node the model
computes exactly what it would have predicted after that path. Its top token at each node is what
it *wants* next there.

**3. Accept.** Starting at the root, follow the child whose token equals what the target wanted,
as far as that goes: this is the **accepted path** (thick and yellow in the trees).

**4. Bonus token.** At the end of the accepted path the target already said what comes next: that
token is added for free (the red star). So every step yields at least one token, and a good guess
yields several.

**Why it is lossless.** Every token kept is the target's own greedy choice after the exact text
before it, which is what plain greedy decoding picks. Guesses only decide how many of those tokens
one forward pass confirms. The Compare tab checks, on every comparison, that all methods produce
identical tokens.

## Where the guesses come from: three memories

Every time the target evaluates a position (the prompt, and every tree node, rejected branches
included) it gives a top-k list of next tokens (k = 8). RECAP keeps these lists under three keys:

| memory | key | kept |
|---|---|---|
| **M1** | the last token | across requests (persistent; Token Recycling's only memory) |
| **M2** | the last two tokens | this request only |
| **M3** | the last three tokens | this request only |

M2 and M3 start empty with every request, so what they hold was predicted *about this image*.

**Fusion.** For a context, RECAP looks up whichever of M3, M2, M1 exist and mixes their lists.
Each entry gets the weight `s(n) × (c + eps)`, normalised: `s(n)` favours longer keys (1, 2, 4 for
1, 2, 3 tokens) and the concentration `c = 1 − entropy / log k` favours confident lists. A node's
*fused probability* is the weighted sum; hover a node to see every source's weight, entropy, the
probability it gave and where it came from (request, step, depth, same image or not).

**Best-first search.** The tree grows from a priority queue ordered by *path score* (the product of
fused probabilities from the root): pop the best candidate, add it, look up its own context, push
its children, until the node budget or depth limit. Continuations of earlier text that repeats in
this request (suffix matches) are added as chains.

## Aliasing: why one-token keys are not enough

M1 remembers, for each token, what followed it *last time*, under whatever image that was. After
"A large" the model predicted "red" for image A; on image B the same words are followed by
"orange". A memory keyed by one token proposes "red" again: it is **aliased**. Guessing wrong costs
no correctness (verification rejects it) but wastes the step. M2/M3, filled on this image, know
better, and the fusion trusts them more. The **Aliasing** tab lists every such state of your runs,
and its guided demo runs exactly this A-then-B scenario.

## The example below

RECAP, fresh memory, example image A then image B with the same question; the trees are those of
the second request (budget {BUDGET} nodes). Node colours (same legend as everywhere in the app):
"""


def build_example(session: Session, settings: Settings) -> Run:
    pair = {e.get("pair"): e for e in settings.examples if e.get("pair")}
    first = pair.get("A") or (settings.examples[0] if settings.examples else None)
    second = pair.get("B") or first
    if first is None:
        raise UserError("no example images in assets/examples/")
    model = session_model(session, settings)
    config = recap.RecapConfig(budget=BUDGET)
    slot = MemorySlot(recap.TokenMemory(model.target.vocab_size, config.top_k))
    runs = [
        decode_to_end(session, settings, open_image(entry["path"], settings), entry["prompt"], "recap",
                      min(MAX_NEW, settings.max_new_tokens), config, memory_slot=slot, model=model,
                      source="walkthrough", label="walkthrough example", add=False)
        for entry in (first, second)
    ]
    return runs[-1]


def figure(run: Run | None, step: Any) -> Any:
    if run is None or not run.trace.steps:
        return empty_figure("Press the button to decode the example.")
    st = find_step(run.trace, as_int("step", step or 1))
    return tree_figure(st, uirevision="walkthrough", max_height=600)


@dataclass
class HowView(Record):
    """The walkthrough's example: what was decoded, its step slider, its tree."""

    summary: Any = KEEP
    step: Any = KEEP
    tree: Any = KEEP


class HowTab:
    """Layout, handlers and wiring of the How it works tab."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def build_example(self, session: Session):
        """Decode the example once per session (on opening the tab or the button), then show it."""
        if session.walkthrough is None:
            if not session.busy.acquire(blocking=False):
                warn("A run is in progress in this session: try again when it is done.")
                return HowView().to(self.ui)
            try:
                session.walkthrough = build_example(session, self.settings)
            except UserError as exc:
                warn(str(exc))
                return HowView(summary=error_markdown(str(exc))).to(self.ui)
            finally:
                session.busy.release()
        run = session.walkthrough
        n = len(run.trace.steps)
        best = max(run.trace.steps, key=lambda s: (s.accepted_length, -s.step)).step
        return HowView(
            summary=f"Decoded: “{md_text(run.trace.text)}” in {n} steps ({run.trace.mat:.2f} tokens per step). "
            f"Showing step {best}, the one with the longest accepted path; move the slider to see others.",
            step=gr.Slider(minimum=1, maximum=max(n, 2), value=best, step=1, interactive=n > 1),
            tree=figure(run, best),
        ).to(self.ui)

    def show(self, session: Session, step: Any):
        return figure(session.walkthrough, step)

    def build(self, tab: gr.Tab, session: gr.State) -> None:
        """The tab's components and events (call inside ``gr.Tab``; ``tab`` is that tab)."""
        gr.Markdown(TEXT)
        gr.HTML(legend_markdown())
        walk_btn = gr.Button("Decode the example", elem_id="recap-walk-run")
        self.ui = HowView(
            summary=gr.Markdown(),
            step=gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False),
            tree=gr.Plot(empty_figure("Press the button to decode the example."), elem_id="recap-walk-tree"),
        )
        gr.on([tab.select, walk_btn.click], gpu_handler(self.build_example), [session], self.ui.outputs(),
              api_visibility="private", trigger_mode="once", **decode_queue(self.settings))
        self.ui.step.input(guarded(self.show), [session, self.ui.step], self.ui.tree, api_visibility="private",
                           trigger_mode="always_last")
