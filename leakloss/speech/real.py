"""Real Nepali recordings (``../shared/data/real-nepali-speech``): loading, and one fixed split by speaker.

The clips are read where they lie, never copied. A recognizer may train on the ``train`` speakers (its card
says so, with the sources' attribution); every figure on real speech is measured on the ``test`` speakers only.
The split is by speaker, fixed by a hash of the speaker id (a third of the OpenSLR 54 speakers), and the one
JuJu2181 speaker (another source, other recording conditions) is always ``test``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from leakloss.textfile import text_lines

#: Attribution per source (clip id prefix) of the recordings.
ATTRIBUTIONS = {
    "slr54-": ("OpenSLR 54, Large Nepali ASR training data set (Google, CC BY-SA 4.0), clips sampled through "
               "github.com/Jenith-rajlawat/NEPALI-SPEECH-RECOGNITION-USING-BILSTM-AND-RESNET (MIT)"),
    "juju2181-": "JuJu2181/Automatic-Nepali-Speech-Recognition-and-Summarizer eval_data (MIT, (c) 2022 Anish Shilpakar)",
}


def attribution(clip_ids) -> str:
    """The attribution of the sources the given clips come from."""
    return "; ".join(text for prefix, text in ATTRIBUTIONS.items() if any(c.startswith(prefix) for c in clip_ids))


def default_dir() -> Path:
    """``$LEAKLOSS_SHARED/data/real-nepali-speech``, else ``../shared/...`` beside the repository."""
    from leakloss.paths import shared_path

    return Path(shared_path("data/real-nepali-speech"))


def speaker_split(speaker: str) -> str:
    """``"train"`` or ``"test"`` for a speaker id (deterministic; the id in any case, with any spaces around it: a
    test speaker spelt ``slr54-7F880`` was a train speaker)."""
    speaker = speaker.strip().lower()
    if not speaker.startswith("slr54-"):
        return "test"
    return "test" if int(hashlib.sha256(speaker.encode()).hexdigest(), 16) % 3 == 0 else "train"


@dataclass(frozen=True)
class RealClip:
    id: str
    path: Path
    text: str
    speaker: str
    split: str

    def load(self) -> Tensor:
        """16 kHz mono float32 ``[t]`` (resampled and downmixed as the scorer reads audio)."""
        from leakloss.audio import load_audio

        return load_audio(self.path)[0]


def real_clips(folder: str | Path | None = None, split: str | None = None) -> list[RealClip]:
    """The clips of ``manifest.jsonl`` (all, or one split); [] when the folder is absent."""
    folder = Path(folder) if folder is not None else default_dir()
    manifest = folder / "manifest.jsonl"
    if not manifest.is_file():
        return []
    clips = []
    for line in text_lines(manifest.read_text(encoding="utf-8")):
        if line.strip():
            row = json.loads(line)
            clips.append(RealClip(row["id"], folder / row["audio"], row["text"], row["speaker"],
                                  speaker_split(row["speaker"])))
    return [c for c in clips if split is None or c.split == split]
