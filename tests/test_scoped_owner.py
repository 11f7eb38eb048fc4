"""Image-scoped memories are opt-in and kept per owner (issue 28.4).

The rows a request writes under an image are predictions made reading its image and prompt,
and their provenance names the prompt. A server sharing one ``TokenMemory`` between users must
not hand one user's rows to another: ``RecapConfig.scoped_memory`` is off by default, and when on,
``owner=`` keeps each owner's scopes apart.
"""

from __future__ import annotations

import pytest
import torch

import recap
from recap.memory.scoped import scope_name
from recap.memory.store import TokenMemory
from recap.shapes.scene import render_scene

ON = recap.RecapConfig(scoped_memory=True, size_loop=False)  # trees drafted whatever the timings


@pytest.fixture(scope="module")
def shapes() -> recap.Target:
    return recap.load_target()


def _reference(target: recap.Target, image, prompt: str, n: int) -> list[int]:
    inputs = recap.prepare_inputs(target, image, prompt)
    with torch.inference_mode():
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=n)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def _context_requests(gen: recap.Generation) -> set[int]:
    """The requests whose M2 / M3 rows this run's trees drew from."""
    assert gen.trace is not None
    return {
        s.request for step in gen.trace.steps for n in step.nodes for s in n.sources if s.kind in ("m2", "m3")
    }


def test_by_default_nothing_is_kept_across_requests(shapes) -> None:
    assert recap.RecapConfig().scoped_memory is False
    a = render_scene(1_000_011)[0]
    memory = TokenMemory.for_target(shapes)
    gens = [recap.generate(shapes, a, q, memory=memory, max_new_tokens=40, trace=True)
            for q in ("Describe the image.", "Describe the image in detail.")]
    assert len(memory.scoped) == 0
    assert _context_requests(gens[1]) <= {gens[1].trace.request}


def test_two_owners_of_one_memory_never_draft_from_each_others_rows(shapes) -> None:
    a = render_scene(1_000_012)[0]
    memory = TokenMemory.for_target(shapes)
    plan = [("alice", "Describe the image in detail."), ("bob", "Describe the image in detail."),
            ("alice", "Describe the image."), ("bob", "Describe the image."), (None, "Describe the image.")]
    gens = [recap.generate(shapes, a, q, memory=memory, config=ON, owner=who, max_new_tokens=48, trace=True)
            for who, q in plan]
    for (_, q), gen in zip(plan, gens):
        assert gen.token_ids == _reference(shapes, a, q, 48)
    mine = {
        who: {g.trace.request for (w, _), g in zip(plan, gens) if w == who} for who in ("alice", "bob", None)
    }
    for (who, _), gen in zip(plan, gens):
        assert _context_requests(gen) <= mine[who], f"{who}'s run drafted from another owner's rows"
    assert _context_requests(gens[2]) & {gens[0].trace.request}, "alice's follow-up did not use her own rows"
    assert _context_requests(gens[3]) & {gens[1].trace.request}, "bob's follow-up did not use his own rows"
    key = gens[0].trace.image_key
    assert set(memory.scoped.scopes) == {scope_name(key, "alice"), scope_name(key, "bob"), key}


def test_scope_names_keep_owners_apart() -> None:
    names = {scope_name("ab12", None), scope_name("ab12", "x"), scope_name("ab12", "x:ab12"),
             scope_name("12", "x:ab"), scope_name("ab12", "y")}
    assert len(names) == 5 and scope_name("ab12", None) == "ab12"


@pytest.mark.parametrize("owner", ["", 3, b"alice"])
def test_an_owner_must_be_a_non_empty_string(shapes, owner) -> None:
    with pytest.raises(ValueError, match="owner must be a non-empty string"):
        recap.generate(shapes, None, "Describe a red circle.", max_new_tokens=2, owner=owner)
