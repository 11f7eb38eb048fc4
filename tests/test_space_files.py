"""What a Hugging Face Space push needs from the tree (docs/deploy.md).

A Space refuses binary files stored as plain git blobs: every binary file in the tree must
match an LFS line of ``.gitattributes``. The Space's card (``README.md``'s front matter)
names the app file and the Gradio version the Space preinstalls, which must be the pinned one.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, f"git {' '.join(args)} (the tree is read from git): {done.stderr}"
    return done.stdout


def is_binary(path: Path) -> bool:
    """Git's own test (and the Hub's): a NUL byte among the first 8000."""
    with path.open("rb") as f:
        return b"\0" in f.read(8000)


def test_every_binary_file_in_the_tree_goes_to_lfs() -> None:
    files = [f for f in git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0") if f]
    binaries = [f for f in files if (ROOT / f).is_file() and is_binary(ROOT / f)]
    assert "assets/shapes-vlm/model.safetensors" in binaries and "assets/examples/pair_A.png" in binaries
    attrs = git("check-attr", "filter", "--", *binaries).splitlines()  # "path: filter: lfs"
    plain = [line.split(": filter: ")[0] for line in attrs if not line.endswith(": filter: lfs")]
    assert not plain, f"binary files that .gitattributes does not send to LFS: {plain}"


def test_the_space_card_names_the_app_and_the_pinned_gradio() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n"), "README.md must open with the Space's front matter"
    card = dict(re.findall(r"^(\w+): *(.*)$", text.split("---\n")[1], flags=re.M))
    assert card["sdk"] == "gradio" and (ROOT / card["app_file"]).is_file()
    pins = (ROOT / "requirements.txt").read_text(encoding="utf-8").split()
    assert f"gradio=={card['sdk_version']}" in pins
