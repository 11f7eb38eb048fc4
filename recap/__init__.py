"""RECAP: context-aware prediction recycling for multimodal speculative decoding.

    import recap
    target = recap.load_target()                  # the embedded shapes model
    memory = recap.TokenMemory.for_target(target)  # keep it to stay warm across requests
    out = recap.generate(target, "assets/examples/scene_1000501.png", "Describe the image.", memory=memory)
    print(out.text, out.mat)

    # or inside transformers' own generate(), on a model loaded with transformers:
    ids = model.generate(**inputs, custom_generate=recap.decoding(method="recap"), max_new_tokens=64)
"""

from typing import TYPE_CHECKING

from recap.core.lazy import lazy_exports

#: The public API: name -> the module that defines it. Imported at first use (``recap.X``,
#: ``from recap import X``), so ``import recap`` alone imports neither torch nor transformers.
_EXPORTS = {
    "RecapConfig": "recap.core.config",
    "InputError": "recap.core.errors",
    "ModelLoadError": "recap.core.errors",
    "PluginError": "recap.core.errors",
    "Generation": "recap.engine.loop",
    "StepRecord": "recap.engine.loop",
    "generate": "recap.engine.loop",
    "iter_steps": "recap.engine.loop",
    "ConversationRun": "recap.engine.conversation",
    "converse": "recap.engine.conversation",
    "MemoryFileError": "recap.memory.file",
    "ContextMemory": "recap.memory.store",
    "RequestMemory": "recap.memory.store",
    "TokenMemory": "recap.memory.store",
    "MEMORY_METHODS": "recap.methods",
    "METHODS": "recap.methods",
    "REGISTRY": "recap.methods",
    "Method": "recap.methods",
    "get_method": "recap.methods",
    "SUPPORTED_FAMILIES": "recap.models.families.registry",
    "RecapGenerateOutput": "recap.integrations.custom_generate",
    "decoding": "recap.integrations.custom_generate",
    "prepare_inputs": "recap.models.inputs",
    "Target": "recap.models.target",
    "load_target": "recap.models.target",
    "DecodeTrace": "recap.trace.format",
    "TraceError": "recap.trace.format",
    "TraceNode": "recap.trace.format",
    "TraceStep": "recap.trace.format",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see (the names are __all__'s)
    from recap.core.config import RecapConfig  # noqa: F401
    from recap.core.errors import InputError, ModelLoadError, PluginError  # noqa: F401
    from recap.engine.conversation import ConversationRun, converse  # noqa: F401
    from recap.engine.loop import Generation, StepRecord, generate, iter_steps  # noqa: F401
    from recap.integrations.custom_generate import RecapGenerateOutput, decoding  # noqa: F401
    from recap.memory.file import MemoryFileError  # noqa: F401
    from recap.memory.store import ContextMemory, RequestMemory, TokenMemory  # noqa: F401
    from recap.methods import MEMORY_METHODS, METHODS, REGISTRY, Method, get_method  # noqa: F401
    from recap.models.families.registry import SUPPORTED_FAMILIES  # noqa: F401
    from recap.models.inputs import prepare_inputs  # noqa: F401
    from recap.models.target import Target, load_target  # noqa: F401
    from recap.trace.format import DecodeTrace, TraceError, TraceNode, TraceStep  # noqa: F401
