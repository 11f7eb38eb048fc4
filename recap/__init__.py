"""RECAP: context-aware prediction recycling for multimodal speculative decoding.

    import recap
    target = recap.load_target()                  # the embedded shapes model
    memory = recap.TokenMemory.for_target(target)  # keep it to stay warm across requests
    out = recap.generate(target, "assets/examples/scene_01.png", "Describe the image.", memory=memory)
    print(out.text, out.mat)
"""

from recap.models.processors import register_auto_classes

register_auto_classes()

from recap.core.config import RecapConfig  # noqa: E402
from recap.core.errors import InputError, ModelLoadError  # noqa: E402
from recap.engine.loop import Generation, StepRecord, generate, iter_steps  # noqa: E402
from recap.memory.file import MemoryFileError  # noqa: E402
from recap.memory.store import ContextMemory, RequestMemory, TokenMemory  # noqa: E402
from recap.methods import MEMORY_METHODS, METHODS, REGISTRY, Method, get_method  # noqa: E402
from recap.models.families.registry import SUPPORTED_FAMILIES  # noqa: E402
from recap.models.inputs import prepare_inputs  # noqa: E402
from recap.models.target import Target, load_target  # noqa: E402
from recap.trace.format import DecodeTrace, TraceError, TraceNode, TraceStep  # noqa: E402

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
