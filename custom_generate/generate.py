"""RECAP as a transformers ``custom_generate`` method: lossless speculative decoding for
vision-language models (draft trees from the model's own recycled predictions, verified in one
pass; the output is token for token ``generate()``'s).

    model.generate(**inputs, custom_generate="<this repository>", trust_remote_code=True,
                   method="recap", max_new_tokens=64)

The decoding is the recap-studio library's (``recap.integrations.custom_generate``): this file only
hands ``generate()``'s arguments over, so the Hub copy and the library never differ.
"""

from typing import Any

# Imported inside try: transformers checks a custom file's plain imports and would name a package
# `recap` (another project on PyPI); the message below names the one this needs.
try:
    from recap.integrations.custom_generate import hub_generate
except ImportError as exc:
    raise ImportError(
        "this custom_generate method needs the recap-studio library (its repository: `pip install .`), "
        f"which could not be imported: {exc}"
    ) from exc


def generate(model: Any, *args: Any, **kwargs: Any) -> Any:
    """``generate()``'s arguments, plus ``method=``, ``memory=``, ``config=``, ``seed=``, ``trace=``,
    ``processor=``, ``owner=``, ``memory_scope=`` (``recap.decoding``'s); see README.md."""
    return hub_generate(model, *args, **kwargs)
