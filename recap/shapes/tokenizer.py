"""Word-level tokenizer, chat template and processor for the shapes language.

Every word of the templated language (capitalised words are their own entries) and every
punctuation mark is one token; the decoder joins tokens with spaces and attaches ". , ?" to
the previous word, so ``tok.decode(tok(answer).input_ids) == answer`` for every prompt and
answer. Chat special tokens follow Qwen2.5-VL's names.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessorPil

from recap.models.processors import Qwen2_5_VLImageProcessor
from recap.shapes.scene import COLORS, IMAGE_SIZE, NUMBERS, PLURALS, POSITIONS, SHAPES, SIZES

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
UNK = "<|unk|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD, UNK)

# Words of the templates in scene.py, plus chat roles.
_TEMPLATE_WORDS = """
system user assistant
Describe The the image in detail There is are one object objects A a an is at on of
What color How many Where List shapes from left to right From there and above below to
no
""".split()
PUNCTUATION = (".", ",", "?")

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# An 84x84 image maps to itself (9 image tokens); anything larger is resized to about
# 84x84 pixels (at most ~9-12 image tokens, aspect ratio kept in steps of 28 px).
MIN_PIXELS = IMAGE_SIZE * IMAGE_SIZE
MAX_PIXELS = IMAGE_SIZE * IMAGE_SIZE


# With ``split_plurals`` (the default, and the shipped model's tokenizer) the shape plurals
# are not words of their own: "circles" is "circle" + "##s". A plural token is only ever
# seen in count questions: an earlier model trained with whole plurals never tied "circles"
# to what a circle looks like (0 of 37 non-zero shape counts right), while colour counts,
# whose colour word every other question shares, were right.
PLURAL_SUFFIX = "##s"


def vocabulary(split_plurals: bool = True) -> list[str]:
    """All tokens, special tokens first (ids 0..7), then punctuation and words."""
    words: list[str] = []
    for w in (
        list(PUNCTUATION)
        + _TEMPLATE_WORDS
        + list(SHAPES)
        + ([PLURAL_SUFFIX] if split_plurals else list(PLURALS.values()))
        + list(COLORS)
        + list(SIZES)
        + [w for p in POSITIONS for w in p.split()]
        + list(NUMBERS)
        + ["size"]  # last, so that adding the size question kept every earlier id
    ):
        if w not in words:
            words.append(w)
    return list(SPECIAL_TOKENS) + words


def build_tokenizer(split_plurals: bool = True) -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(vocabulary(split_plurals))}
    # WordPiece: a word in the vocabulary is one token; with split_plurals a shape plural
    # splits into the shape and "##s" (greedy longest prefix); anything else is <|unk|>.
    tk = Tokenizer(models.WordPiece(vocab=vocab, unk_token=UNK, continuing_subword_prefix="##"))
    # Split on whitespace and before/after punctuation: "objects." -> "objects", "."
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token=UNK,
        pad_token=PAD,
        eos_token=IM_END,
        additional_special_tokens=[IM_START, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD],
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_image_processor() -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


def build_processor(split_plurals: bool = True) -> Qwen2_5_VLImageProcessor:
    """The processor shipped with the model (tokenizer + PIL image processor + chat template)."""
    return Qwen2_5_VLImageProcessor(
        image_processor=build_image_processor(),
        tokenizer=build_tokenizer(split_plurals),
        chat_template=CHAT_TEMPLATE,
    )


def chat_messages(
    prompt: str, with_image: bool = True, history: Sequence[tuple[str, str]] = ()
) -> list[dict]:
    """The messages of a question: one user turn (the image, optional, then the prompt), or,
    with ``history`` = earlier (question, answer) turns about the image, a conversation.

    In a conversation the image sits in the first user turn only and every later user turn
    is text, as a person shows a picture once and then asks follow-ups (and as the library's
    ``messages=`` / ``converse`` render a chat); each answer is an assistant turn.
    """
    messages: list[dict] = []
    for question, reply in history:
        messages += _user_turn(question, with_image and not messages)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": reply}]})
    return messages + _user_turn(prompt, with_image and not messages)


def conversation_messages(turns: Sequence[tuple[str, str]], with_image: bool = True) -> list[dict]:
    """A whole conversation, every (question, answer) turn answered (what training renders)."""
    if not turns:
        raise ValueError("a conversation needs at least one (question, answer) turn")
    *history, (question, reply) = turns
    last = {"role": "assistant", "content": [{"type": "text", "text": reply}]}
    return chat_messages(question, with_image, history) + [last]


def _user_turn(prompt: str, with_image: bool) -> list[dict]:
    content: list[dict] = [{"type": "image"}] if with_image else []
    content.append({"type": "text", "text": prompt})
    return [{"role": "user", "content": content}]
