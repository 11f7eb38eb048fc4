"""The app serving a Qwen3-VL checkpoint (tests/qwen3_vl_checkpoint.py), over HTTP (gradio_client).

``RECAP_MODEL=<dir> python app.py`` is what a Space runs (``load_settings`` reads the variable;
``launch_app(dir)`` builds the same app in-process); a GPU Space lists the hub checkpoint in
``RECAP_ALLOWED_MODELS`` and visitors pick it by its short name (docs/app.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import example, launch_app
from gradio_client import Client, handle_file
from qwen3_vl_checkpoint import NAME, build

import recap


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("qwen3-vl-app") / NAME)


def test_recap_model_names_the_default_model_by_its_folder(ckpt: Path, monkeypatch) -> None:
    from app.state.settings import load_settings

    monkeypatch.setenv("RECAP_MODEL", str(ckpt))
    assert load_settings().model_choices() == [NAME]


def test_a_space_lists_the_hub_checkpoint_by_its_short_name(monkeypatch) -> None:
    from app.state.settings import load_settings

    monkeypatch.setenv("RECAP_PUBLIC", "1")
    monkeypatch.setenv("RECAP_ALLOWED_MODELS", "Qwen/Qwen3-VL-2B-Instruct")
    settings = load_settings("assets/shapes-vlm")
    assert settings.public and settings.model_choices() == ["shapes-vlm", "qwen3-vl-2b-instruct"]
    assert settings.check_model("qwen3-vl-2b-instruct").source == "Qwen/Qwen3-VL-2B-Instruct"


def test_the_app_decodes_and_labels_tokens_as_words(ckpt: Path) -> None:
    demo, url = launch_app(str(ckpt))
    try:
        image, prompt = example()
        answer = Client(url, verbose=False).predict(
            handle_file(image), prompt, "recap", 8, api_name="/decode"
        )
    finally:
        demo.close()
    trace = recap.DecodeTrace.from_json(answer)
    assert trace.model == NAME and len(trace.token_ids) == 8 and trace.steps
    assert "".join(trace.token_texts) == trace.text
    target = recap.load_target(ckpt)  # the labels the library gives: leading space kept, no "Ġ" marker
    labels = [node.text for step in trace.steps for node in step.nodes]
    assert labels == [target.token_text(node.token) for step in trace.steps for node in step.nodes]
    assert not any("Ġ" in label or "Ċ" in label for label in labels)
