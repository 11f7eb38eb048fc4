"""The image key is a fingerprint of the full decoded pixels (issue 28.4).

Provenance ('was it the same image?') and the image-scoped memories read ``image_key``: two
document pages one digit apart must not share a key (a thumbnail's key gave them one), and the
same pixels read from another file must.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image, ImageDraw
from test_lossless import make_image

import recap
from recap.models.inputs import image_key, images_key, load_image


def receipt(total: str) -> Image.Image:
    """A white 600 x 300 page with two lines of small black text."""
    page = Image.new("RGB", (600, 300), "white")
    draw = ImageDraw.Draw(page)
    draw.text((40, 40), "RECEIPT 2026-12-01", fill="black")
    draw.text((40, 80), f"TOTAL {total} EUR", fill="black")
    return page


def test_pages_one_digit_apart_get_different_keys() -> None:
    a, b = receipt("1234.50"), receipt("1284.50")
    assert a.tobytes() != b.tobytes()
    assert image_key(a) != image_key(b)


def test_one_pixel_changes_the_key() -> None:
    a = Image.new("RGB", (512, 512), (200, 200, 200))
    b = a.copy()
    b.putpixel((301, 7), (200, 200, 201))
    assert image_key(a) != image_key(b)


def test_the_same_pixels_from_another_file_get_the_same_key(tmp_path) -> None:
    page = receipt("99.00")
    buffer = io.BytesIO()
    page.save(buffer, format="PNG")
    (tmp_path / "page.png").write_bytes(buffer.getvalue())
    page.save(tmp_path / "page.bmp")
    key = image_key(page)
    assert image_key(page.copy()) == key
    assert image_key(load_image(tmp_path / "page.png")) == key == image_key(load_image(tmp_path / "page.bmp"))


def test_size_and_mode_are_part_of_the_key() -> None:
    data = bytes(range(18))
    wide, tall = Image.frombytes("RGB", (3, 2), data), Image.frombytes("RGB", (2, 3), data)
    grey = Image.frombytes("L", (18, 1), data)
    assert wide.tobytes() == tall.tobytes() == grey.tobytes()
    assert len({image_key(wide), image_key(tall), image_key(grey)}) == 3
    assert image_key(None) is None


def test_keys_are_the_full_sha256() -> None:
    """Image keys are never cut short (issue 34: a 64-bit cut and a 48-bit SHA-1 invite collisions):
    one image's key and several images' key are 64 hex digits, and distinct."""
    a, b = receipt("1.00"), receipt("2.00")
    keys = {image_key(a), image_key(b), images_key([a, b]), images_key([b, a])}
    assert len(keys) == 4
    assert all(len(key) == 64 and int(key, 16) >= 0 for key in keys)  # type: ignore[arg-type]
    assert images_key([a]) == image_key(a) and images_key([]) is None


@pytest.mark.parametrize("changed", [(0, 0), (45, 35)])
def test_images_one_pixel_apart_never_share_scoped_rows(load_tiny, changed: tuple[int, int]) -> None:
    target = load_tiny("qwen2_vl")
    a = make_image(5)
    b = a.copy()
    r, g, bl = b.getpixel(changed)
    b.putpixel(changed, ((r + 1) % 256, g, bl))
    memory = recap.TokenMemory.for_target(target)
    config = recap.RecapConfig(scoped_memory=True)
    recap.generate(target, a, "describe the image .", max_new_tokens=12, memory=memory, config=config)
    assert memory.scoped.rows(image_key(a)) > 0 and memory.scoped.rows(image_key(b)) == 0
    out = recap.generate(target, b, "describe the image .", max_new_tokens=12, memory=memory, config=config,
                         trace=True)
    assert out.trace is not None and out.trace.image_key == image_key(b) != image_key(a)
    assert len(memory.scoped) == 2
    assert [r.image_key for r in memory.requests] == [image_key(a), image_key(b)]
