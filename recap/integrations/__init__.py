"""RECAP inside other libraries' entry points: ``custom_generate`` (transformers' ``generate()``)."""
