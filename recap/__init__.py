"""RECAP: context-aware prediction recycling for multimodal speculative decoding.

    import recap
    target = recap.load_target()                  # the embedded shapes model
    memory = recap.TokenMemory.for_target(target)  # keep it to stay warm across requests
    out = recap.generate(target, "assets/examples/scene_01.png", "Describe the image.", memory=memory)
    print(out.text, out.mat)
"""

from recap.processors import register_auto_classes

register_auto_classes()

from recap.config import RecapConfig  # noqa: E402
from recap.engine import Generation, StepRecord, generate, iter_steps  # noqa: E402
from recap.memory import ContextMemory, MemoryFileError, RequestMemory, TokenMemory  # noqa: E402
from recap.methods import MEMORY_METHODS, METHODS, REGISTRY, Method, get_method  # noqa: E402
from recap.models import (  # noqa: E402
    SUPPORTED_FAMILIES,
    InputError,
    ModelLoadError,
    Target,
    load_target,
    prepare_inputs,
)
from recap.trace import DecodeTrace, TraceError, TraceNode, TraceStep  # noqa: E402

__all__ = [
    "MEMORY_METHODS",
    "METHODS",
    "REGISTRY",
    "SUPPORTED_FAMILIES",
    "ContextMemory",
    "DecodeTrace",
    "Generation",
    "InputError",
    "MemoryFileError",
    "Method",
    "ModelLoadError",
    "RecapConfig",
    "RequestMemory",
    "StepRecord",
    "Target",
    "TokenMemory",
    "TraceError",
    "TraceNode",
    "TraceStep",
    "generate",
    "get_method",
    "iter_steps",
    "load_target",
    "prepare_inputs",
]
