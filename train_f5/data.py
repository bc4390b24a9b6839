"""The Hindi-base corpus: espeak ``hi`` voices reading Devanagari phrases, as 24 kHz log mels.

IndicF5's base learned Hindi from Hindi speech; here the Hindi base learns from espeak ``hi`` reading
Devanagari (Nepali) text, so it carries exactly the leaks leakloss measures: Hindi schwa deletion and
Hindi vowel qualities. Phrases of 1-4 words come from the built-in sentences and, when present (a ``warning:``
line when not), the Nepali prompts in ``../shared/data/nepali-prompts`` (read from there, never copied). Words chosen by
:func:`is_test_word` never enter training: they are the fine-tune experiment's held-out test words.

The corpus is synthesised once and cached as one safetensors file (all mels concatenated) plus a JSON
index, keyed by a hash of its texts, voices and version.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torchaudio.functional as AF
from torch import Tensor

from leakloss.atomic import atomic_directory
from leakloss.checks import SettingsError
from leakloss.constants import MEL_FLOOR, MEL_HOP, MEL_SAMPLE_RATE, SAMPLE_RATE
from leakloss.paths import shared_path
from leakloss.speech import versions
from leakloss.speech.corpus import (
    SentenceFileError,
    builtin_sentences,
    read_sentences,
    split_text_words,
    teacher_reading,
)
from leakloss.speech.synth import Voice, speak_text
from leakloss.text.normalize import TextError
from leakloss.timing import TimedSite
from leakloss.vocoder import log_mel

CORPUS_VERSION = 2  # 2: each reading's phones stored (content supervision)
DEFAULT_PROMPTS = Path(shared_path("data/nepali-prompts/prompts.tsv"))


def is_test_word(word: str, modulus: int = 10) -> bool:
    """The fixed held-out word set of the F5 experiments: a stable hash of the word, one word in ``modulus``."""
    return int(hashlib.sha1(word.encode("utf-8")).hexdigest(), 16) % modulus == 0


def phrases(sentences: Sequence[str], *, max_words: int = 4, seed: int = 0) -> list[str]:
    """Split sentences into phrases of 1..``max_words`` words (random lengths, fixed by ``seed``); phrases with
    a test word are dropped; duplicates removed, order kept."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    for sentence in sentences:
        try:
            words = split_text_words(sentence)
        except TextError:  # not pronounceable Devanagari: nothing to read
            continue
        i = 0
        while i < len(words):
            n = rng.randint(1, max_words)
            chunk = words[i: i + n]
            i += n
            if chunk and not any(is_test_word(w) for w in chunk):
                out[" ".join(chunk)] = None
    return list(out)


def read_corpus_sentences(prompts: str | Path | None = None, *, required: bool | None = None,
                          setting: str = "prompts") -> tuple[list[str], Path | None]:
    """The built-in sentences plus a prompts file's, and the prompts file read (None: none was).

    ``prompts`` None stands for :data:`DEFAULT_PROMPTS` (the shared Nepali prompts). ``required`` (default: a
    path was given) makes a missing file a :class:`SettingsError` naming ``setting`` (a mistyped path cut the
    corpus from 6,259 phrases to 1,192 without a word); otherwise a missing file is a ``warning:`` line and the
    built-in sentences alone."""
    required = prompts is not None if required is None else required
    path = DEFAULT_PROMPTS if prompts is None else Path(prompts).expanduser()
    sentences = builtin_sentences()
    if not path.is_file():
        if required:
            raise SettingsError(f"{setting}={prompts}: no such file")
        print(f"warning: {setting}: {path} is not there: the corpus is the built-in sentences alone, without "
              "the Nepali prompts", file=sys.stderr)
        return sentences, None
    try:
        return sentences + read_sentences(path), path
    except SentenceFileError as err:  # unreadable or empty: one settings error, not a traceback
        raise SettingsError(f"{setting}={prompts if prompts is not None else path}: {err}") from None


def default_sentences(prompts: str | Path | None = None) -> list[str]:
    """The built-in sentences, plus the prompts (``prompts`` given: that file, which must exist; None: the shared
    Nepali prompts, a ``warning:`` line when they are not there)."""
    return read_corpus_sentences(prompts)[0]


def step_seed(seed: int, step: int, stream: str) -> int:
    """A 63-bit seed that is a pure function of (``seed``, ``step``, ``stream``), the same in every process and
    Python version (sha256, not ``hash``): the F5 pretraining draws step ``step``'s randomness from it, so a
    resumed run draws what the uninterrupted one drew."""
    digest = hashlib.sha256(f"train_f5/{stream}/{seed}/{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass
class MelCorpus:
    """``mels[offsets[i]:offsets[i + 1]]`` is item i's log mel ``[n_i, 100]``; ``texts[i]``, ``voices[i]``,
    ``phones[i]`` (the phones the voice said, cleaned espeak IPA)."""

    mels: Tensor  # [N, 100] fp16, all items concatenated
    offsets: Tensor  # [items + 1] long
    texts: list[str]
    voices: list[str]
    phones: list[list[str]]

    def __len__(self) -> int:
        return len(self.texts)

    def mel(self, i: int) -> Tensor:
        return self.mels[self.offsets[i]: self.offsets[i + 1]].float()

    def frames(self, i: int) -> int:
        return int(self.offsets[i + 1] - self.offsets[i])


def corpus_key(texts: Sequence[str], voices: Sequence[Voice], teacher: bool = False) -> str:
    h = hashlib.sha256(f"v{CORPUS_VERSION}|".encode())
    h.update(json.dumps([list(texts), [v.__dict__ for v in voices]], ensure_ascii=False).encode())
    h.update(f"|{versions.espeak_version()}".encode())  # an upgraded espeak-ng reused the old one's readings
    if teacher:  # the old keys stay valid for espeak's own reading
        h.update(b"|teacher")
    return h.hexdigest()[:16]


_WORKER_FRONTEND = None


def _init_worker(teacher: bool) -> None:
    global _WORKER_FRONTEND
    torch.set_num_threads(1)  # one process per core: threads within each would only contend
    if teacher:
        from leakloss.text.frontend import NepaliFrontend

        _WORKER_FRONTEND = NepaliFrontend()


def _read_one(job: tuple[str, Voice, bool]) -> tuple[Tensor, list[str]] | None:
    """One reading as ``(log mel [n, 100] fp16, phones)``; None when it is shorter than 0.1 s."""
    text, voice, teacher = job
    reading = teacher_reading(text, voice, _WORKER_FRONTEND) if teacher else speak_text(text, voice)
    wave = reading.waveform
    if wave.numel() < SAMPLE_RATE // 10:
        return None
    mel = log_mel(AF.resample(wave, SAMPLE_RATE, MEL_SAMPLE_RATE)[None])[0]  # [n, 100]
    return mel.half(), list(reading.phones)


def build_corpus(texts: Sequence[str], voices: Sequence[Voice], cache_dir: str | Path, *,
                 progress: bool = True, teacher: bool = False, workers: int = 1) -> MelCorpus:
    """Every text read by one voice (round robin), as log mels; cached under ``cache_dir/<key>``. ``teacher``:
    the voices say the Nepali frontend's phones (:func:`teacher_reading`) instead of reading the text with
    espeak's own rules (the Hindi voices' way). ``workers`` > 1 synthesises in that many processes (the
    result is the same as with one: each reading depends only on its text and voice)."""
    from safetensors.torch import load_file, save_file
    from tqdm.auto import tqdm

    folder = Path(cache_dir) / corpus_key(texts, voices, teacher)
    if not (folder / "index.json").is_file():
        jobs = [(text, voices[i % len(voices)], teacher) for i, text in enumerate(texts)]
        if workers > 1:
            import multiprocessing

            # spawn, not fork: a fork of a process with threads (torch's, a logger's) can inherit a held lock and
            # hang for good (seen once in four suite runs: a worker of tests/train_f5's tiny run on a futex). A
            # spawned worker re-imports the parent's main module: run from a file, ``-m`` or ``-c``, never stdin.
            with multiprocessing.get_context("spawn").Pool(workers, _init_worker, (teacher,)) as pool:
                results = list(tqdm(pool.imap(_read_one, jobs, chunksize=16), total=len(jobs),
                                    desc="espeak corpus", disable=not progress))
        else:
            global _WORKER_FRONTEND
            if teacher:
                from leakloss.text.frontend import NepaliFrontend

                _WORKER_FRONTEND = NepaliFrontend()
            results = [_read_one(job) for job in tqdm(jobs, desc="espeak corpus", disable=not progress)]
        mels, offsets, kept, names, phones = [], [0], [], [], []
        for (text, voice, _), result in zip(jobs, results):
            if result is None:
                continue
            mels.append(result[0])
            offsets.append(offsets[-1] + result[0].shape[0])
            kept.append(text)
            names.append(voice.name)
            phones.append(result[1])
        with atomic_directory(folder) as tmp:
            save_file({"mels": torch.cat(mels), "offsets": torch.tensor(offsets)}, str(tmp / "mels.safetensors"))
            (tmp / "index.json").write_text(json.dumps({"version": CORPUS_VERSION, "texts": kept, "voices": names,
                                                        "phones": phones}, ensure_ascii=False), encoding="utf-8")
    tensors = load_file(str(folder / "mels.safetensors"))
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    return MelCorpus(tensors["mels"], tensors["offsets"], index["texts"], index["voices"], index["phones"])


def pair_batches(corpus: MelCorpus, max_frames: int, pair_prob: float, seed: int, first_step: int | None = None):
    """Endless batches ``(mel [b, n, 100], lens [b], texts, phones)`` of about ``max_frames`` frames in all.

    With probability ``pair_prob`` an item is two readings by the same voice joined (text "A B", phones of A
    then B): at inference the prompt is another utterance, so training on joined readings puts that in
    distribution. ``first_step`` given: the k-th batch is step ``first_step + k``'s, drawn from
    :func:`step_seed` (``seed``, that step) alone, so a run resumed at step s draws the batches the uninterrupted
    run drew from step s on; None: one stream seeded with ``seed``.
    """
    yield from joined_batches(corpus.voices, lambda i: (corpus.mel(i), corpus.texts[i], corpus.phones[i]),
                              max_frames, pair_prob, seed, shift=lambda phone, _offset: phone, first_step=first_step)


def _shift_site(site: TimedSite, offset: float) -> TimedSite:
    return replace(site, start=site.start + offset, end=site.end + offset)


def joined_batches(voices: Sequence[str], item: Callable[[int], tuple[Tensor, str, list]],
                   max_frames: int, pair_prob: float, seed: int,
                   shift: Callable[[object, float], object] = _shift_site, first_step: int | None = None,
                   ) -> Iterator[tuple[Tensor, Tensor, list[str], list[list]]]:
    """:func:`pair_batches` over items ``i`` read by ``voices[i]``, ``item(i) -> (mel [n, 100], text, sites in
    seconds)``, each batch item with its sites (a joined item's second reading's sites moved by ``shift(site,
    the first reading's duration)``): ``(mel [b, n, 100], lens [b], texts, sites)``. Any per-reading list can
    stand in for the sites (e.g. phones, with ``shift`` leaving them as they are). ``first_step``: as in
    :func:`pair_batches` (each batch from its own step's seed)."""
    rng = random.Random(seed)
    n_items = len(voices)
    by_voice: dict[str, list[int]] = {}
    for i, voice in enumerate(voices):
        by_voice.setdefault(voice, []).append(i)
    step = first_step
    while True:
        if step is not None:  # this batch depends on (seed, step) alone, not on the batches drawn before it
            rng = random.Random(step_seed(seed, step, "batch"))
            step += 1
        items: list[tuple[Tensor, str, list[TimedSite]]] = []
        longest = 0
        while True:
            i = rng.randrange(n_items)
            mel, text, sites = item(i)
            if rng.random() < pair_prob:
                mel2, text2, sites2 = item(rng.choice(by_voice[voices[i]]))
                offset = mel.shape[0] * MEL_HOP / MEL_SAMPLE_RATE
                sites = list(sites) + [shift(s, offset) for s in sites2]
                mel, text = torch.cat([mel, mel2]), f"{text} {text2}"
            longest = max(longest, mel.shape[0])
            if items and longest * (len(items) + 1) > max_frames:
                break
            items.append((mel, text, list(sites)))
        n = max(m.shape[0] for m, _, _ in items)
        batch = torch.full((len(items), n, items[0][0].shape[1]), math.log(MEL_FLOOR))
        for k, (m, _, _) in enumerate(items):
            batch[k, : m.shape[0]] = m
        yield (batch, torch.tensor([m.shape[0] for m, _, _ in items]), [t for _, t, _ in items],
               [s for _, _, s in items])
