"""Sampling in the app: the Sampling group's /run and /compare parameters, the trace they give, the views.

A sampled run is ``recap.generate`` with the same generation config and seed, token for token;
in Compare one seed gives every method the same text; bad values are refused naming the knob;
the trace carries the settings and the draws, and the hover and the inspector show them.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest_app import advanced_values, downloaded_trace, example
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

import recap
from app.boundary.errors import UserError
from app.presenters.fusion import fusion_figure, inspect_node
from app.presenters.sampling import accept_prob, inspector_markdown
from app.presenters.text import status_markdown
from app.presenters.tree import tree_figure
from app.state.decoding import DEFAULT_SEED, OFF, Sampling
from app.state.runs import Run
from app.widgets.sampling_form import KNOB_NAMES, MAX_TEMPERATURE, default_values, parse_sampling
from app.widgets.step_panel import picture
from recap.trace.format import TraceSampling

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target, app_url

ADVANCED = advanced_values()
N = 32
HOT = {"sampling": True, "temperature": 3.0, "top_p": 0.95, "sampling_top_k": 0, "seed": 7}
HOT_CONFIG = {"do_sample": True, "temperature": 3.0, "top_p": 0.95, "top_k": 0}


def knobs(**overrides) -> list:
    """The Sampling group's values for /run, positionally after the advanced settings."""
    return list({**HOT, **overrides}.values())


@pytest.fixture(scope="module")
def sampled(app_url):
    """One sampled /run of RECAP (the client, its status line, its trace)."""
    client = Client(app_url, verbose=False)
    image, prompt = example()
    status, error, *_, path = client.predict(handle_file(image), prompt, "recap", N, *ADVANCED, *knobs(),
                                             api_name="/run")
    assert not error, error
    return client, status, downloaded_trace(path)


# ------------------------------------------------------------------ the form, without a server


def test_the_knobs_are_the_api_parameters_appended_after_the_advanced_settings(app_url):
    info = Client(app_url, verbose=False).view_api(return_format="dict", print_info=False)["named_endpoints"]
    run = [p["parameter_name"] for p in info["/run"]["parameters"]]
    assert run[-len(KNOB_NAMES):] == list(KNOB_NAMES) and run[4] == "budget"  # old positions unchanged
    compare = [p["parameter_name"] for p in info["/compare"]["parameters"]]
    assert compare[:2] == ["image", "prompt"] and compare[-len(KNOB_NAMES):] == list(KNOB_NAMES)


def test_off_by_default_and_the_seed_is_read_either_way():
    assert parse_sampling(default_values()) == OFF and OFF.generation_config is None
    # off: unread
    assert parse_sampling({**default_values(), "temperature": "x", "seed": 5}) == Sampling(seed=5)
    on = parse_sampling({**default_values(), "sampling": True, "sampling_top_k": 0})
    # top_k sent
    assert on.generation_config == {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 0}
    assert on.seed == DEFAULT_SEED and not on.note
    assert "greedily" in parse_sampling({**default_values(), "sampling": True, "sampling_top_k": 1}).note


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [("temperature", 0, "sampling: temperature must be above 0 and at most 10, got 0"),
     ("temperature", MAX_TEMPERATURE + 1, "sampling: temperature must be above 0 and at most 10, got 11"),
     ("temperature", "hot", "sampling: temperature must be a number"),
     ("top_p", 1.5, "sampling: top-p must be above 0 and at most 1, got 1.5"),
     ("sampling_top_k", -1, "sampling: top-k must be at least 0 and at most 1000, got -1"),
     ("sampling_top_k", 2.5, "sampling: top-k must be a whole number"),
     ("seed", -3, "sampling: seed must be at least 0 and at most 9007199254740991, got -3"),
     ("seed", None, "sampling: seed must be a whole number"),
     ("sampling", "yes", "sampling: sampling on must be true or false")],
)
def test_a_bad_value_is_named(name, value, message):
    with pytest.raises(UserError, match=re.escape(message)):
        parse_sampling({**HOT, name: value})


# ------------------------------------------------------------------ through the API


def test_a_sampled_run_is_recap_generate_with_the_same_seed(sampled, target):
    _, status, trace = sampled
    image, prompt = example()
    want = recap.generate(
        target, image, prompt, method="recap", max_new_tokens=N, generation_config=HOT_CONFIG, seed=7
    )
    assert trace.token_ids == want.token_ids
    greedy = recap.generate(target, image, prompt, method="ar", max_new_tokens=N)
    assert trace.token_ids != greedy.token_ids  # it really sampled: at temperature 3 the text moves
    assert "sampled: temperature 3 · top-k off · top-p 0.95 · seed 7" in status


def test_the_trace_of_a_sampled_run_carries_the_settings_and_the_draws(sampled):
    _, _, trace = sampled
    assert trace.sampling == TraceSampling(temperature=3.0, top_p=0.95, seed=7)
    for step in trace.steps:
        assert step.drawn == step.accepted[: len(step.emitted)]  # the walk: one draw per emitted token
        assert len(step.accept_probs) == len(step.nodes) and step.accept_probs[0] == 1.0
    assert trace.to_dict()["version"] == 3


def test_positional_callers_and_sampling_off_get_the_models_own_decoding(sampled, app_url, target):
    client = Client(app_url, verbose=False)
    image, prompt = example()
    status, error, *_, path = client.predict(handle_file(image), prompt, "tr", N, *ADVANCED, api_name="/run")
    off = downloaded_trace(path)
    assert not error and off.sampling is None and "sampled" not in status
    assert off.token_ids == recap.generate(target, image, prompt, method="ar", max_new_tokens=N).token_ids
    *_, path = client.predict(
        handle_file(image),
        prompt,
        "tr",
        N,
        *ADVANCED,
        *knobs(sampling=False, temperature="x"),
        api_name="/run",
    )
    assert downloaded_trace(path).token_ids == off.token_ids  # off: the other knobs are not read


def test_compare_with_one_seed_gives_every_method_the_same_text(sampled, app_url):
    _, _, trace = sampled
    client = Client(app_url, verbose=False)
    image, prompt = example()
    summary = json.loads(client.predict(handle_file(image), prompt, N, **HOT, api_name="/compare"))
    methods = summary["methods"]
    assert summary["identical"] and set(methods) == {"recap", "tr", "pld", "ar"}
    assert all(v["token_ids"] == trace.token_ids for v in methods.values())  # the /run's draws, every method
    assert summary["sampling"]["seed"] == 7 and summary["sampling"]["temperature"] == 3.0
    other = json.loads(
        client.predict(handle_file(image), prompt, N, **{**HOT, "seed": 8}, api_name="/compare")
    )
    assert other["identical"] and other["methods"]["ar"]["token_ids"] != trace.token_ids  # the seed decides


@pytest.mark.parametrize(("name", "value", "field"), [
    ("temperature", -1, "temperature"), ("temperature", "NaN", "temperature"), ("seed", 2.5, "seed"),
    ("seed", 1e30, "seed"), ("top_p", 0, "top-p"), ("top_p", [1], "top-p"), ("sampling_top_k", 5000, "top-k"),
    ("sampling", "true", "sampling on")])
def test_bad_values_are_refused_by_the_api_naming_the_field(app_url, name, value, field):
    client = Client(app_url, verbose=False)
    image, prompt = example()
    _, error, *_ = client.predict(handle_file(image), prompt, "recap", 8, *ADVANCED, *knobs(**{name: value}),
                                  api_name="/run")
    assert f"sampling: {field} must be" in error
    with pytest.raises(AppError, match=f"sampling: {field} must be"):
        client.predict(handle_file(image), prompt, 8, **{**HOT, name: value}, api_name="/compare")


# ------------------------------------------------------------------ what the views show of it


def test_the_hover_and_the_inspector_show_each_childs_chance_and_the_draw(sampled):
    _, _, trace = sampled
    # a root with children
    step = max(trace.steps, key=lambda s: sum(1 for n in s.nodes[1:] if n.parent == 0))
    fig = tree_figure(step)
    hover = {
        i: h for tr in fig.data if tr.customdata is not None for i, h in zip(tr.customdata, tr.hovertext)
    }
    for node in step.nodes[1:]:
        assert f"acceptance probability <b>{accept_prob(step, node.index):.3f}</b>" in hover[node.index]
    assert "the target drew" in hover[0] and "(no draw" not in hover[0]  # the walk starts at the root
    undrawn = [n.index for n in step.nodes if n.index not in step.drawn]
    assert all("no draw here" in hover[i] for i in undrawn)
    bonus = next(tr for tr in fig.data if tr.name.startswith("bonus token"))
    assert "drawn by the target" in bonus.hovertext[0]
    line = inspector_markdown(step, 0)
    kids = [n for n in step.nodes[1:] if n.parent == 0]
    assert "Sampled" in line and all(f"{step.accept_probs[k.index]:.3f}" in line for k in kids[:8])
    assert line in picture(Run(1, trace), step, 0).heading
    bars = " ".join(h for tr in fusion_figure(inspect_node(step, 0)).data for h in (tr.hovertext or ()))
    assert "acceptance probability" in bars


def test_a_greedy_trace_shows_no_sampling(app_url):
    image, prompt = example()
    data = json.loads(Client(app_url, verbose=False).predict(handle_file(image), prompt, "recap", 8,
                                                             api_name="/decode"))
    trace = recap.DecodeTrace.from_dict(data)
    step = trace.steps[0]
    assert trace.sampling is None and "sampled" not in status_markdown(trace)
    assert inspector_markdown(step, 0) == "" and accept_prob(step, 0) is None
    hovers = " ".join(h for tr in tree_figure(step).data if tr.customdata is not None for h in tr.hovertext)
    assert "acceptance probability" not in hovers and "drew" not in hovers
