"""The app serving a real-files checkpoint (tests/real_models.py), over HTTP (gradio_client).

``RECAP_MODEL=<dir> python app.py`` is what a Space runs; ``launch_app(dir)`` builds the same
app in-process. Qwen2.5-VL-7B's files (a processor class transformers 5 lacks) and a LLaVA-NeXT
snapshot without processor_config.json (a raw TypeError before) must load and decode.
"""

from __future__ import annotations

import pytest
from conftest_app import example, launch_app
from gradio_client import Client, handle_file
from real_models import LLAVA_NEXT, QWEN2_5_VL

import recap

pytest_plugins = ["conftest_app"]


@pytest.mark.parametrize("name", [QWEN2_5_VL, LLAVA_NEXT])
def test_app_decodes_on_a_real_checkpoint(real_dirs, name: str) -> None:
    demo, url = launch_app(str(real_dirs[name]))
    try:
        image, prompt = example()
        answer = Client(url, verbose=False).predict(
            handle_file(image), prompt, "recap", 8, api_name="/decode"
        )
    finally:
        demo.close()
    trace = recap.DecodeTrace.from_json(answer)
    assert len(trace.token_ids) == 8 and trace.steps
    assert "".join(trace.token_texts) == trace.text
