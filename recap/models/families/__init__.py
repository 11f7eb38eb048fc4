"""Model families: the ``FamilyAdapter`` contract (``base``), one module per family
(``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, ``llava``, ``llava_next``, ``idefics3``,
``smolvlm``, ``gemma3``) and the registry that lists them
(``registry``). A new family is one module plus one ``register`` line in the registry."""
