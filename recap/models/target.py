"""Loading targets: ``load_target`` and the ``Target`` it returns.

``load_target(path_or_id=None)`` loads a vision-language model of a registered family
(``recap.SUPPORTED_FAMILIES``; built in: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, LLaVA-1.5,
LLaVA-NeXT / 1.6, SmolVLM / Idefics3 and Gemma 3) and its processor, from a
checkpoint laid out as its files ship (see ``recap.models.files``) or as ``save_pretrained``
writes it. ``None`` is the embedded shapes model in ``assets/shapes-vlm``. Never
``trust_remote_code``.

Family quirks live in the family adapters (``recap.models.families``: the contract in
``base``, the families in ``registry``), building inputs in ``recap.models.inputs``, token
texts in ``recap.models.tokens``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from recap.core.assets import SHAPES_VLM
from recap.core.errors import ModelLoadError
from recap.models.families.base import FamilyAdapter
from recap.models.families.registry import ADAPTERS, family_names
from recap.models.files import CheckpointFiles
from recap.models.tokens import TokenTexts

DEFAULT_MODEL_DIR = SHAPES_VLM  # the embedded model: assets/shapes-vlm (installed: recap/assets/shapes-vlm)
#: The attention implementations that apply the tree pass's additive 4D mask (or, for Gemma 3, its
#: dict of one mask per layer type) as given. Everything else transformers accepts is refused
#: (``check_attention``): flash attention 2 / 3 / 4 and hub kernels take no 4D mask, flex attention
#: builds its own block mask, and the paged variants run on a cache of their own.
EXACT_ATTENTION = ("eager", "sdpa")


# --------------------------------------------------------------------------- target


@dataclass
class Target:
    """A loaded target model with its processor and family adapter."""

    model: Any
    processor: Any
    adapter: FamilyAdapter
    name: str
    device: torch.device
    dtype: torch.dtype
    _texts: TokenTexts | None = field(default=None, repr=False)
    prefill_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def tokenizer(self) -> Any:
        if self.processor is None:  # wrapped by from_model without one: say so, not NoneType's error
            raise ValueError(
                "this target has no processor, and texts need its tokenizer: wrap the model with "
                "recap.Target.from_model(model, processor)"
            )
        return self.processor.tokenizer

    @property
    def short_name(self) -> str:
        """The model's name for people: its folder name or hub id, never a full server path."""
        return _short_name(self.name)

    @property
    def family(self) -> str:
        return self.adapter.family

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def eos_token_ids(self) -> frozenset[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = getattr(self.model.config, "eos_token_id", None)
        if eos is None:
            return frozenset()
        return frozenset([eos] if isinstance(eos, int) else [int(e) for e in eos])

    @property
    def image_token_ids(self) -> frozenset[int]:
        return self.adapter.image_token_ids(self.model)

    @property
    def max_positions(self) -> int | None:
        cfg = getattr(self.model.config, "text_config", self.model.config)
        return getattr(cfg, "max_position_embeddings", None)

    @property
    def texts(self) -> TokenTexts:
        """Labels and spellings of this tokenizer's tokens (``recap.models.tokens``), memoised."""
        if self._texts is None:
            self._texts = TokenTexts(self.tokenizer)
        return self._texts

    def token_text(self, token: int) -> str:
        """The visible label of one token: leading space kept, special tokens by name,
        partial UTF-8 bytes as ``<0xNN>`` (tree nodes, memory rows; ``recap.models.tokens``)."""
        return self.texts.label(int(token))

    def spell(self, ids: list[int]) -> list[str]:
        """What each output token adds to the output text; ``"".join`` of it is the text."""
        return self.texts.spell(ids)

    def output_text(self, ids: list[int]) -> str:
        """The output text of generated ids (the join of their spellings)."""
        return self.texts.text(ids)

    @classmethod
    def from_model(cls, model: Any, processor: Any = None) -> Target:
        """Wrap a model (and its processor) already loaded with transformers (``wrap_model``)."""
        return wrap_model(model, processor)


def _short_name(name: str) -> str:
    """How messages name a checkpoint: its folder name (or hub id), never a full server path."""
    return Path(name).name if Path(name).exists() else name


def _read_config(path_or_id: str, files: CheckpointFiles) -> tuple[Any, FamilyAdapter]:
    """The model config and the adapter of its ``model_type``, which must be a registered family.

    config.json is read as plain JSON first, so that a model this library does not support (an
    audio or text-only model, a ``model_type`` transformers does not know) is refused naming its
    ``architectures`` entry and the supported families, before transformers interprets it.
    """
    from transformers import AutoConfig

    raw = files.read_json("config.json")
    if raw is not None and raw.get("model_type") not in ADAPTERS:
        architectures = raw.get("architectures")
        listed = isinstance(architectures, list) and architectures
        named = ", ".join(map(str, architectures)) if listed else "none"
        raise ModelLoadError(
            f"{files.label}: unsupported model family {raw.get('model_type')!r} (config.json architectures: "
            f"{named}); recap supports vision-language models of these families: {family_names()}"
        )
    try:
        config = AutoConfig.from_pretrained(path_or_id, trust_remote_code=False, **files.hub())
    except Exception as exc:  # noqa: BLE001 - every loader failure becomes one clear error
        raise ModelLoadError(f"cannot read a model config from {path_or_id!r}: {exc}") from exc
    family = getattr(config, "model_type", None)
    adapter = ADAPTERS.get(family)
    if adapter is None:  # config.json said otherwise (or a hub copy without a readable one)
        raise ModelLoadError(
            f"{files.label}: unsupported model family {family!r}; supported: {family_names()}"
        )
    return config, adapter


def load_target(
    path_or_id: str | os.PathLike[str] | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    attn_implementation: str | dict[str, str] | None = None,
    device_map: str | dict[str, Any] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    revision: str | None = None,
    token: str | bool | None = None,
) -> Target:
    """Load a supported VLM and its processor.

    path_or_id: a directory saved with ``save_pretrained`` (model + processor) or a hub
    id (where a hub is reachable); ``None`` is the embedded model in assets/shapes-vlm.
    device / dtype: ``None`` picks CUDA with bf16 when a GPU is present, else CPU fp32; dtype may be
    a ``torch.dtype``, its name (``"bfloat16"``) or ``"auto"``: the checkpoint's own dtype.
    device_map: instead of ``device``, passed to ``from_pretrained`` as it is (``"auto"``, or a dict of
    module name -> GPU index, ``"cpu"`` or ``"disk"``; needs accelerate), with ``offload_folder`` for
    ``"disk"``: a model split over GPUs or offloaded. ``Target.device`` is then where its inputs go
    (accelerate's main device); every layer keeps its own cache and gets the tree mask on its device.
    revision / token: a hub id's branch, tag or commit and the hub token, passed to every read of the
    checkpoint (None: the default branch; huggingface_hub's own token, e.g. ``$HF_TOKEN``).
    attn_implementation: ``None`` (transformers' default, sdpa where the model has it), ``"eager"``
    or ``"sdpa"`` (or a dict of them per sub-config): the ones that apply the tree mask; any other
    value raises ValueError naming it (``check_attention``), as does a checkpoint whose config
    asks for one.
    """
    check_attention(attn_implementation)
    if path_or_id is None:
        if not (DEFAULT_MODEL_DIR / "config.json").is_file():
            raise ModelLoadError(
                f"the embedded default model is missing: expected {DEFAULT_MODEL_DIR} (a checkout has it in "
                "assets/shapes-vlm, a package installed with `pip install .` in recap/assets/shapes-vlm; "
                "to rebuild it: `python -m recap.shapes.train --out OUT` (the recipe's five stages; OUT is "
                "the shipped model)"
            )
        path_or_id = DEFAULT_MODEL_DIR
    name = str(path_or_id)
    # A hub id is "org/name": one slash, no leading "/", "." or "~". Anything else is a path.
    looks_local = (
        isinstance(path_or_id, os.PathLike) or name.startswith(("/", ".", "~")) or name.count("/") > 1
    )
    if looks_local or Path(name).exists():
        name = str(Path(name).expanduser())
        if not Path(name).exists():
            raise ModelLoadError(f"model path does not exist: {name}")
    if device is not None and device_map is not None:
        raise ValueError("give device or device_map, not both: device_map places every layer itself")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except RuntimeError as exc:  # torch's message lists the device types
        raise ValueError(f"unknown device {str(device)!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(
            f"device {str(device)!r} asked for, but this torch ({torch.__version__}) sees no CUDA GPU "
            f"(built for CUDA: {torch.version.cuda or 'no, a CPU build'})"
        )
    dtype = _resolve_dtype(dtype, device)

    from recap.drafting import warm

    warm.start()  # the drafting kernels compile in the background while the model loads
    files = CheckpointFiles(name, _short_name(name), revision=revision, token=token)
    config, adapter = _read_config(name, files)
    if attn_implementation is None:  # the checkpoint's config may ask for one (``_attn_implementation``)
        check_attention(_config_attention(config), where=f"{files.label}: config.json's attn_implementation")
    # transformers ignores a broken generation_config.json silently (no EOS ids, no penalties): refuse it.
    files.read_json("generation_config.json")
    # The processor first: its files are small, and a broken one should fail before the weights load.
    processor = adapter.build_processor(files, config)
    import transformers

    model_cls = getattr(transformers, adapter.model_class, None)
    if model_cls is None:  # a family newer than this transformers (or a misspelt adapter)
        raise ModelLoadError(
            f"this transformers ({transformers.__version__}) has no {adapter.model_class}, "
            "the model class of "
            f"the {adapter.family} family; upgrade transformers"
        )
    kwargs: dict[str, Any] = {"dtype": dtype, **files.hub()}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if device_map is not None:
        kwargs["device_map"] = device_map
        if offload_folder is not None:
            kwargs["offload_folder"] = str(offload_folder)
    try:
        model = model_cls.from_pretrained(name, trust_remote_code=False, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(
            f"cannot load {adapter.model_class} from {name!r}: {exc} (check config.json and the weights)"
        ) from exc
    if device_map is None:
        model.to(device)
    else:  # accelerate placed the layers (and hooks that move activations between them): moving would undo it
        device = main_device(model)
    model.eval()
    if dtype == "auto":  # what the checkpoint asked for: its parameters say
        dtype = model.dtype
    return Target(model=model, processor=processor, adapter=adapter, name=name, device=device, dtype=dtype)


def _resolve_dtype(dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype | str:
    """A torch dtype, or ``"auto"`` (the checkpoint's, resolved after loading); None: bf16 on CUDA, else
    fp32."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if not isinstance(dtype, str) or not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}: use a torch dtype such as 'bfloat16' or 'float32', "
                         "or 'auto'")
    return getattr(torch, dtype)


def main_device(model: Any) -> torch.device:
    """Where a model loaded with a ``device_map`` takes its inputs: accelerate's main device (the execution
    device of the hook on the whole model, which also brings the outputs back there), else where its
    parameters are (a map of one device is a plain ``.to``)."""
    hook = getattr(model, "_hf_hook", None)
    found = getattr(hook, "execution_device", None)
    if found is None:
        found = next((p.device for p in model.parameters() if p.device.type != "meta"), "cpu")
    return torch.device(f"cuda:{found}" if isinstance(found, int) else found)


def check_attention(value: Any, *, where: str = "attn_implementation") -> None:
    """ValueError unless ``value`` (an ``attn_implementation``, or a dict of them per sub-config) is
    None or one of ``EXACT_ATTENTION``: a tree verified without its mask would not be exact."""
    values = list(value.values()) if isinstance(value, dict) else [value]
    bad = [v for v in values if v is not None and v not in EXACT_ATTENTION]
    if bad:
        raise ValueError(
            f"{where} {bad[0]!r} cannot verify a draft tree exactly: it does not apply the additive 4D tree "
            f"mask (flash attention, flex attention, paged attention and hub kernels do not); use "
            f"{' or '.join(map(repr, EXACT_ATTENTION))} (or None, transformers' default)"
        )


def check_processor(processor: Any) -> None:
    """ValueError unless ``processor`` is None or a processor with a tokenizer (what spells tokens)."""
    if processor is not None and getattr(processor, "tokenizer", None) is None:
        raise ValueError(
            f"processor must be the model's processor (with a tokenizer), got {type(processor).__name__}"
        )


def _config_attention(config: Any) -> dict[str, Any]:
    """The attention implementation a model config asks for: its own and its text config's (None: unset)."""
    out = {"config": getattr(config, "_attn_implementation", None)}
    text = config.get_text_config() if hasattr(config, "get_text_config") else None
    if text is not None and text is not config:
        out["text_config"] = getattr(text, "_attn_implementation", None)
    return out


# --------------------------------------------------------------------------- a model loaded elsewhere


def wrap_model(model: Any, processor: Any = None) -> Target:
    """A ``Target`` over a model (and its processor) loaded with transformers: ``Target.from_model``.

    The model must be the conditional-generation class of a registered family (the class
    ``load_target`` loads: ``Qwen2_5_VLForConditionalGeneration``, ``LlavaForConditionalGeneration``,
    ...) with an attention implementation that applies the tree mask (``check_attention``); it is
    used as it is (its device, dtype and generation config; nothing is moved or reloaded).
    processor: the model's processor (``AutoProcessor.from_pretrained``: anything with a
    ``tokenizer``), needed for texts (``Generation.text``, traces, ``recap.generate`` on an image and
    a prompt); None for a target that only decodes prepared inputs (``inputs=``, ``custom_generate``).
    Anything else raises ValueError naming it.
    """
    import transformers

    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None)
    adapter = ADAPTERS.get(family) if isinstance(family, str) else None
    if adapter is None:
        what = f"model family {family!r}" if family else f"{type(model).__name__}: no model config"
        raise ValueError(f"cannot wrap {what}: recap supports these families: {family_names()}")
    model_cls = getattr(transformers, adapter.model_class, None)
    if model_cls is None or not isinstance(model, model_cls):
        raise ValueError(
            f"cannot wrap {type(model).__name__}: the {adapter.family} family decodes with "
            f"{adapter.model_class} (the class with the language-model head that generate() runs on)"
        )
    check_attention(_config_attention(config), where=f"{type(model).__name__}'s attn_implementation")
    check_processor(processor)
    name = str(getattr(model, "name_or_path", "") or adapter.model_class)  # the folder or hub id it came from
    from recap.drafting import warm

    warm.start()  # as load_target: the drafting kernels compile in the background, not in the first decode
    return Target(model=model, processor=processor, adapter=adapter, name=name, device=model.device,
                  dtype=model.dtype)
