"""One decode step as trace data: the tree's nodes with texts, origins and per-source details.

``trace_step`` is called by the engine after each verification when a trace is asked for;
it reads the step's ``DraftTree`` (drafter-side data) and writes the plain ``TraceStep``
that every view of the app reads (``recap.trace.format``): the app never sees a ``DraftTree``.
"""

from __future__ import annotations

from recap.drafting.tree import DraftTree
from recap.memory.store import RequestMemory
from recap.models.target import Target
from recap.trace.format import SourceInfo, TraceNode, TraceStep
from recap.trace.mixture import mixture
from recap.trace.sizing import TreeSizing


def node_origin(tree: DraftTree, i: int) -> str:
    """Where node i came from: its drafter's label, or for fused nodes the source that
    gave more than half of its fused probability ('mixed' when none did)."""
    origin = tree.origins[i]
    if origin != "mixed":
        return origin
    if not tree.sources[i]:
        return "suffix" if tree.suffix[i] else "mixed"
    tok = tree.tokens[i]
    rows = [(weight, entry.ids, entry.normalised()) for _, weight, entry in tree.sources[i]]
    total = mixture(rows).get(tok, 0.0)
    best, kind = max((mixture([row]).get(tok, 0.0), kind) for row, (kind, _, _) in zip(rows, tree.sources[i]))
    return kind if total > 0 and best / total > 0.5 else "mixed"


def trace_step(
    target: Target,
    tree: DraftTree,
    *,
    argmax: list[int],
    path: list[int],
    bonus: int,
    emitted: list[int],
    step: int,
    step_t: dict[str, float],
    req_mem: RequestMemory | None,
    drawn: list[int] | None = None,
    accept_probs: list[float] | None = None,
    sizing: TreeSizing | None = None,
) -> TraceStep:
    """Turn one step's tree into trace data (texts, origins, per-source details).

    Sampling: ``drawn`` the nodes where the target drew (its walk), ``accept_probs`` per node
    the probability of its acceptance at its parent; None when decoding greedily.
    """
    on_path = set(path)
    here = req_mem.image_key if req_mem is not None else None
    nodes: list[TraceNode] = []
    for i, tok in enumerate(tree.tokens):
        sources = []
        for kind, weight, entry in tree.sources[i]:
            info = req_mem.m1.request_info(entry.request) if req_mem is not None else None
            sources.append(
                SourceInfo(
                    kind=kind,
                    weight=float(weight),
                    entropy=float(entry.entropy),
                    concentration=float(entry.concentration),
                    prob=float(entry.prob_of(tok)),
                    request=entry.request,
                    step=entry.step,
                    depth=entry.depth,
                    same_image=None if info is None else (info.image_key == here),
                    top_token=entry.ids[0],
                    top_text=target.token_text(entry.ids[0]),
                    top_prob=float(entry.probs[0]),
                    top_ids=list(entry.ids),
                    top_probs=[round(float(q), 6) for q in entry.probs],  # 6 decimals: a smaller trace file
                    top_texts=[target.token_text(t) for t in entry.ids],
                )
            )
        nodes.append(
            TraceNode(
                index=i,
                token=tok,
                text=target.token_text(tok),
                parent=tree.parents[i],
                depth=tree.depths[i],
                score=float(tree.scores[i]),
                fused=float(tree.fused[i]),
                origin=node_origin(tree, i),
                target_token=argmax[i],
                target_text=target.token_text(argmax[i]),
                accepted=i in on_path,
                suffix=tree.suffix[i],
                sources=sources,
                order=tree.order[i],
            )
        )
    return TraceStep(
        step=step,
        nodes=nodes,
        accepted=list(path),
        bonus_token=bonus,
        bonus_text=target.token_text(bonus),
        emitted=list(emitted),
        draft_s=step_t["draft"],
        verify_s=step_t["verify"],
        update_s=step_t["update"],
        tree_size=len(tree) - 1,
        drawn=list(drawn or []),
        accept_probs=[round(p, 6) for p in accept_probs]
        if accept_probs
        else [],  # 6 decimals: a smaller file
        sizing=sizing,
    )
