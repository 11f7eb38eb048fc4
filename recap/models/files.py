"""Reading a checkpoint's non-weight files as they ship, with errors that name the file.

A checkpoint directory (or hub id) holds, besides the weights:

* ``config.json`` (the model) and ``generation_config.json`` (read by transformers);
* the tokenizer: ``tokenizer.json``, or ``vocab.json`` + ``merges.txt`` (byte-level BPE),
  or ``tokenizer.model`` (SentencePiece), with ``tokenizer_config.json``;
* the chat template: ``chat_template.jinja``, ``chat_template.json`` or the
  ``chat_template`` key of ``tokenizer_config.json`` (first found wins, as in transformers);
* the image processor: ``preprocessor_config.json`` (as checkpoints ship) or the
  ``image_processor`` entry of ``processor_config.json`` (as transformers 5 saves);
* optionally ``processor_config.json`` with processor settings (LLaVA's ``patch_size``...).

The family adapters (``recap.models.families``) combine these into a processor explicitly, by
class, so that a class name in a file that this transformers version lacks (Qwen2.5-VL's
``Qwen2_5_VLImageProcessor``) does not matter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recap.core.errors import ModelLoadError

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")


@dataclass(frozen=True)
class CheckpointFiles:
    """The non-weight files of one checkpoint (a local directory or a hub id)."""

    source: str  # what load_target was given (a path or a hub id)
    label: str  # how messages name it
    revision: str | None = None  # a hub id's branch, tag or commit (None: the hub's default branch)
    # a hub token (None: huggingface_hub's own, e.g. $HF_TOKEN); never in a repr, a log or a message
    token: str | bool | None = field(default=None, repr=False)

    def hub(self) -> dict[str, Any]:
        """What every read of this checkpoint passes to transformers: the revision and token given, no others
        (a local directory ignores both)."""
        return {k: v for k, v in (("revision", self.revision), ("token", self.token)) if v is not None}

    def find(self, name: str) -> Path | None:
        """The local path of one file of the checkpoint, or None where it has none."""
        local = Path(self.source) / name
        if Path(self.source).is_dir():
            return local if local.is_file() else None
        from transformers.utils import cached_file

        try:
            found = cached_file(self.source, name, _raise_exceptions_for_missing_entries=False, **self.hub())
        except Exception:  # noqa: BLE001 - an unreachable hub is "no such file" here
            return None
        return Path(found) if found else None

    def read_json(self, name: str) -> dict[str, Any] | None:
        """One JSON file as a dict, None where absent; a broken file is a ModelLoadError."""
        path = self.find(name)
        if path is None:
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelLoadError(f"{self.label}: {name} is not valid JSON ({exc}); restore it "
                                 "from the original checkpoint") from exc
        if not isinstance(data, dict):
            raise ModelLoadError(f"{self.label}: {name} must hold a JSON object, not {type(data).__name__}")
        return data


def load_tokenizer(files: CheckpointFiles) -> Any:
    """The checkpoint's tokenizer (``AutoTokenizer`` over its own files, never remote code)."""
    if not any(files.find(name) for name in TOKENIZER_FILES):
        raise ModelLoadError(
            f"{files.label}: no tokenizer files: expected tokenizer.json, or vocab.json + merges.txt, or "
            "tokenizer.model (with tokenizer_config.json); copy them from the original checkpoint"
        )
    if files.find("vocab.json") and not files.find("tokenizer.json") and not files.find("merges.txt"):
        raise ModelLoadError(f"{files.label}: vocab.json needs merges.txt (byte-level "
                             "BPE) or a tokenizer.json")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(files.source, trust_remote_code=False, **files.hub())
    except Exception as exc:  # noqa: BLE001 - every tokenizer failure becomes one clear error
        raise ModelLoadError(f"{files.label}: cannot load the tokenizer from tokenizer.json / "
                             f"tokenizer_config.json: {exc}") from exc
    if not callable(getattr(tokenizer, "decode", None)) or not hasattr(tokenizer, "convert_tokens_to_ids"):
        raise ModelLoadError(f"{files.label}: tokenizer_config.json gave a "
                             f"{type(tokenizer).__name__}, not a tokenizer")
    return tokenizer


def load_chat_template(files: CheckpointFiles, tokenizer: Any) -> str:
    """The chat template: chat_template.jinja, chat_template.json, then tokenizer_config.json."""
    jinja = files.find("chat_template.jinja")
    if jinja is not None:
        try:
            text = jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelLoadError(f"{files.label}: cannot read chat_template.jinja: {exc}") from exc
        if text.strip():
            return text
    data = files.read_json("chat_template.json")
    if data is not None:
        template = data.get("chat_template")
        if not isinstance(template, str) or not template.strip():
            raise ModelLoadError(f"{files.label}: chat_template.json has no string 'chat_template' key")
        return template
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the default one
        template = template.get("default")
    if isinstance(template, str) and template.strip():
        return template
    raise ModelLoadError(
        f"{files.label}: no chat template: expected chat_template.jinja, chat_template.json or a "
        "'chat_template' key in tokenizer_config.json; copy it from the original checkpoint"
    )


def image_processor_config(files: CheckpointFiles) -> dict[str, Any]:
    """The image processor's settings: preprocessor_config.json, else processor_config.json's entry."""
    data = files.read_json("preprocessor_config.json")
    if data is not None:
        return data
    proc = files.read_json("processor_config.json") or {}
    nested = proc.get("image_processor")
    if isinstance(nested, dict):
        return nested
    raise ModelLoadError(
        f"{files.label}: no image processor settings: expected preprocessor_config.json (or an "
        "'image_processor' entry in processor_config.json); copy preprocessor_config.json from the original "
        "checkpoint"
    )


def build_image_processor(files: CheckpointFiles, cls: Any) -> Any:
    """``cls`` (a PIL image processor class) from the checkpoint's settings, whatever class they name."""
    settings = dict(image_processor_config(files))
    for key in ("image_processor_type", "processor_class", "auto_map"):
        settings.pop(key, None)  # the class is chosen by the family, not by these names
    try:
        return cls.from_dict(settings)
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(
            f"{files.label}: preprocessor_config.json does not fit {cls.__name__}: {exc}; "
            "restore it from the original checkpoint"
        ) from exc


def token_id(tokenizer: Any, token: str) -> int | None:
    """The id of one token string, None when the vocabulary lacks it."""
    tid = tokenizer.convert_tokens_to_ids(token)
    unk = getattr(tokenizer, "unk_token_id", None)
    if not isinstance(tid, int) or (tid == unk and token != getattr(tokenizer, "unk_token", None)):
        return None
    return tid
