"""recap.bench.realsize / realrun: the real-size benchmark's inputs and report (not its timings).

Building a checkpoint at real size takes minutes and gigabytes, so these tests check what
the builder is made of (the image, SmolVLM's tokenizer at its real vocabulary, the refusal
of an unknown size) and the report's arithmetic on a given result.
"""

from __future__ import annotations

import numpy as np
import pytest

from recap.__main__ import main as cli_main
from recap.bench import realrun, realsize


def test_the_photograph_is_500_by_375_made_here_and_the_same_every_time() -> None:
    a, b = realsize.photo_image(), realsize.photo_image()
    assert a.size == (500, 375) and a.mode == "RGB"
    pixels = np.asarray(a, dtype=np.float64)
    assert np.array_equal(pixels, np.asarray(b))
    assert (
        pixels.std() > 20 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 10_000
    )  # photo-like, not flat


def test_smolvlm_tokenizer_has_the_real_vocabulary_and_added_token_ids(tmp_path) -> None:
    from tokenizers import Tokenizer

    ids = realsize._smol_tokenizer(tmp_path)
    assert ids["<global-img>"] == realsize.SMOL_BASE_VOCAB == 49152
    assert ids["<end_of_utterance>"] == 49152 + len(realsize.SMOL_ADDED) - 1 == 49279  # vocab_size 49280
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    text = "Describe this image <image> in detail."
    enc = tok.encode(text, add_special_tokens=False)
    assert ids["<image>"] in enc.ids and tok.decode(enc.ids, skip_special_tokens=False) == text


def test_an_unknown_size_or_method_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown real size 'qwen9'.*qwen2-vl-2b, smolvlm-256m"):
        realsize.build_checkpoint("qwen9", tmp_path)
    with pytest.raises(ValueError, match="unknown real-size method.*'?pld'?"):
        realrun.run("smolvlm-256m", methods=("hf", "pld"), out=tmp_path, work=tmp_path)
    with pytest.raises(SystemExit):
        cli_main(["bench", "--real-size", "qwen9"])


def test_the_table_gives_each_row_against_hf() -> None:
    row = {"same_as_hf": True, "nodes": 0.0, "passes": 24, "verify_s": 0.5}
    result = {
        "size": "smolvlm-256m",
        "max_new_tokens": 24,
        "commit": "abc",
        "when": "now",
        "rows": [
            {
                **row,
                "method": "hf",
                "first_token_s": 10.0,
                "total_s": 20.0,
                "decode_tok_s": 2.3,
                "added_mb": 100.0,
            },
            {
                **row,
                "method": "recap-auto",
                "first_token_s": 10.5,
                "total_s": 15.0,
                "decode_tok_s": 4.6,
                "added_mb": 110.0,
                "nodes": 3.2,
                "passes": 9,
                "same_as_hf": False,
            },
        ],
    }
    table = realrun.render(result)
    assert "| prefill + first token (s) | 10.00 | 10.50 (1.05x) |" in table
    assert "| decode tokens/s | 2.30 | 4.60 (2.00x) |" in table
    assert "| memory added by the call (MB) | 100 | 110 (1.10x) |" in table
    assert "| drafted nodes per pass | 0.0 | 3.2 |" in table
    assert "cost measurement" not in table  # the default measures nothing at load
    assert "cold" not in table.splitlines()[0]
    assert "cold: each process's first request" in realrun.render({**result, "cold": True}).splitlines()[0]
    assert "| same tokens as hf | yes | **no** |" in table
