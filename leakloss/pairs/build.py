"""Pair builders: physical splices, natural one-vowel edits, and teacher-vs-Hindi-base readings.

Every builder works on readings with phone timings (espeak's events here; an aligner's for real
recordings) and writes a validated manifest (:mod:`leakloss.pairs.schema`) plus WAV files.

- physical: the teacher's reading with the site vowel's span cut out (deletion) or replaced by the
  same voice's Hindi vowel, taken from the same word spoken with that vowel (quality); the control is
  the sham (same cut, original vowel back). 2 ms fades at every join.
- natural: the teacher voice speaks the sentence with exactly that one vowel edit; kept only when
  the confirming recognizer's CTC likelihood prefers the edited phones on the edited audio and the
  original phones on the original audio. Control: the unedited reading.
- model: the Hindi base's reading against the teacher's; kept only where the Hindi base *actually
  spoke* the Hindi variant at the site (its own phone events, aligned to the Nepali phones, show the
  vowel missing or of the Hindi quality) — the phonetic evidence. Control: the teacher's reading.

The reference is always the teacher in another voice, never the query's voice.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from leakloss.audio import save_audio
from leakloss.constants import SAMPLE_RATE
from leakloss.pairs.schema import PairRecord, write_manifest
from leakloss.pairs.splice import delete_span, replace_span, sham_span
from leakloss.schema import PAIR_KINDS, PairKind
from leakloss.speech.synth import Reading, Voice, speak_phones, speak_text
from leakloss.text.normalize import normalize_devanagari
from leakloss.text.phones import equivalents
from leakloss.text.sites import OPEN_CENTRAL, Site, WordSites, align_phones

#: Words never used for training (as the seed kept हैन and किनकि out): evidence only in held-out tables.
DEFAULT_HELDOUT_WORDS = ("हैन", "किनकि", "नेकपा", "बैठकमा", "तरकारी")


@dataclass
class BuildStats:
    sites: int = 0
    physical: int = 0
    natural: int = 0
    natural_rejected: int = 0
    model: int = 0
    model_unqualified: int = 0
    skipped_timing: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _site_phone_index(reading: Reading, word_index: int, word_phones: Sequence[str], site: Site) -> int | None:
    """Index in ``reading.phones`` of the site's vowel, if the reading spoke that word as written."""
    idx = [i for i, w in enumerate(reading.phone_words) if w == word_index]
    spoken = [reading.phones[i] for i in idx]
    if len(spoken) != len(word_phones):
        return None
    if not all(equivalents(a) & equivalents(b) for a, b in zip(spoken, word_phones)):
        return None
    return idx[site.position]


def _phone_span(reading: Reading, i: int) -> tuple[float, float]:
    end = reading.phone_starts[i + 1] if i + 1 < len(reading.phones) else reading.duration
    return reading.phone_starts[i], end


def edit_word(words: Sequence[Sequence[str]], word_index: int, site: Site) -> list[list[str]]:
    """The words with the one site edit applied (vowel removed, or swapped for the Hindi vowel)."""
    out = [list(w) for w in words]
    if site.kind == "deletion":
        del out[word_index][site.position]
    else:
        out[word_index][site.position] = site.hindi
    return out


def hindi_spoke_variant(nepali: Sequence[str], hindi_spoken: Sequence[str], site: Site) -> bool:
    """Did the Hindi reading realise the site the Hindi way (vowel absent / of the Hindi quality)?"""
    for i, j in align_phones(nepali, hindi_spoken):
        if i != site.position:
            continue
        if site.kind == "deletion":
            return j is None or not (equivalents(hindi_spoken[j]) & OPEN_CENTRAL)
        return j is not None and bool(equivalents(hindi_spoken[j]) & equivalents(site.hindi))
    return False


class PairBuilder:
    """Builds the three pair kinds for sentences, writing audio under ``out_dir/audio``."""

    def __init__(self, out_dir: str | Path, confirm: Callable[[torch.Tensor, list[str], list[str]], bool] | None = None,
                 heldout_words: Sequence[str] = DEFAULT_HELDOUT_WORDS, seed: int = 0) -> None:
        self.out_dir = Path(out_dir)
        (self.out_dir / "audio").mkdir(parents=True, exist_ok=True)
        self.confirm = confirm
        self.heldout_words = {normalize_devanagari(w) for w in heldout_words}  # as the finder's words are
        self.rng = random.Random(seed)
        self.stats = BuildStats()
        self.records: list[PairRecord] = []

    def _save(self, name: str, wave: torch.Tensor) -> str:
        rel = f"audio/{name}.wav"
        save_audio(self.out_dir / rel, wave, subtype="FLOAT")
        return rel

    def add_sentence(self, sentence_id: str, text: str, words: list[WordSites], voice: Voice, ref_voice: Voice,
                     hindi_voice: Voice, split: str, max_sites: int = 3,
                     kinds: Sequence[PairKind] = PAIR_KINDS) -> None:
        spoken = [w for w in words if w.skipped is None]
        phones = [w.nepali for w in spoken]
        index_of = {w.index: k for k, w in enumerate(spoken)}  # text word index -> spoken word index
        sites = [(w, s) for w in spoken for s in w.testable_sites]
        if not sites:
            return
        self.rng.shuffle(sites)
        sites = sites[:max_sites]
        teacher = speak_phones(phones, voice)
        reference = speak_phones(phones, ref_voice)
        t_rel, r_rel = self._save(f"{sentence_id}-teacher-{voice.name}", teacher.waveform), \
            self._save(f"{sentence_id}-ref-{ref_voice.name}", reference.waveform)
        hindi = h_rel = None
        if "model" in kinds:
            hindi = speak_text(" ".join(w.word for w in spoken), hindi_voice)
            h_rel = self._save(f"{sentence_id}-hindi-{hindi_voice.name}", hindi.waveform)
        for w, site in sites:
            k = index_of[w.index]
            self.stats.sites += 1
            site_split = "heldout" if w.word in self.heldout_words else split
            common = dict(kind=site.kind, contrast=site.contrast, text=text, sentence_id=sentence_id,
                          word_index=w.index, word=w.word, site_position=site.position, nepali=site.nepali,
                          hindi=site.hindi, reference=r_rel, split=site_split)
            tag = f"{sentence_id}-w{w.index}-p{site.position}"
            i = _site_phone_index(teacher, k, w.nepali, site)
            if i is None:
                self.stats.skipped_timing += 1
                continue
            if "physical" in kinds:
                start, end = _phone_span(teacher, i)
                if site.kind == "deletion":
                    altered = delete_span(teacher.waveform, start, end)
                else:
                    donor = speak_phones(edit_word(phones, k, site), voice)
                    j = _site_phone_index(donor, k, edit_word(phones, k, site)[k], site)
                    if j is None:
                        self.stats.skipped_timing += 1
                        altered = None
                    else:
                        ds, de = _phone_span(donor, j)
                        altered = replace_span(teacher.waveform, start, end,
                                               donor.waveform[int(ds * SAMPLE_RATE): int(de * SAMPLE_RATE)])
                if altered is not None:
                    sham = sham_span(teacher.waveform, start, end)
                    self.records.append(PairRecord(
                        id=f"{tag}-physical", pair_kind="physical", query=self._save(f"{tag}-phys-alt", altered),
                        control=self._save(f"{tag}-phys-sham", sham), voice=voice.name, **common))
                    self.stats.physical += 1
            if "natural" in kinds:
                edited_words = edit_word(phones, k, site)
                edited = speak_phones(edited_words, voice)
                flat_edit = [p for ws in edited_words for p in ws]
                flat_orig = [p for ws in phones for p in ws]
                if self.confirm is None or (self.confirm(edited.waveform, flat_edit, flat_orig)
                                            and self.confirm(teacher.waveform, flat_orig, flat_edit)):
                    self.records.append(PairRecord(
                        id=f"{tag}-natural", pair_kind="natural", query=self._save(f"{tag}-nat-edit", edited.waveform),
                        control=t_rel, voice=voice.name, **common))
                    self.stats.natural += 1
                else:
                    self.stats.natural_rejected += 1
            if hindi is not None:
                if hindi_spoke_variant(w.nepali, hindi.word_phones(k), site):
                    self.records.append(PairRecord(
                        id=f"{tag}-model", pair_kind="model", query=h_rel, control=t_rel, voice=hindi_voice.name,
                        **common))
                    self.stats.model += 1
                else:
                    self.stats.model_unqualified += 1

    def add_recorded_sentence(self, sentence_id: str, text: str, words: list[WordSites], voice, ref_voice: Voice,
                              split: str, max_sites: int = 3) -> int:
        """Physical pairs in a Festival/flite voice (:mod:`leakloss.speech.festival`): the voice says the Nepali
        phones through its phone input; the site vowel's own segments (the synthesizer's times) are cut out
        (deletion) or replaced by the same voice's Hindi vowel from the word said with it (quality); the sham
        cuts and puts the samples back. Reference: the espeak teacher ``ref_voice``. Returns pairs added."""
        from leakloss.speech import festival

        spoken = [w for w in words if w.skipped is None]
        phones = [list(w.nepali) for w in spoken]
        sites = [(k, w, s) for k, w in enumerate(spoken) for s in w.testable_sites]
        if not sites:
            return 0
        try:
            reading = festival.speak_phones(phones, voice)
        except (festival.SynthesisError, KeyError):
            self.stats.skipped_timing += len(sites)
            return 0
        spans = festival.nepali_phone_spans(reading, voice, phones)
        self.rng.shuffle(sites)
        r_rel = self._save(f"{sentence_id}-ref-{ref_voice.name}", speak_phones(phones, ref_voice).waveform)
        added = 0
        for k, w, site in sites[:max_sites]:
            self.stats.sites += 1
            span = spans[k][site.position]
            if span is None:
                self.stats.skipped_timing += 1
                continue
            start, end = span
            if site.kind == "deletion":
                altered = delete_span(reading.waveform, start, end)
            else:
                edited = edit_word(phones, k, site)
                try:
                    donor = festival.speak_phones(edited, voice)
                except (festival.SynthesisError, KeyError):
                    self.stats.skipped_timing += 1
                    continue
                donor_span = festival.nepali_phone_spans(donor, voice, edited)[k][site.position]
                if donor_span is None:
                    self.stats.skipped_timing += 1
                    continue
                ds, de = donor_span
                altered = replace_span(reading.waveform, start, end,
                                       donor.waveform[int(ds * SAMPLE_RATE): int(de * SAMPLE_RATE)])
            tag = f"{sentence_id}-w{w.index}-p{site.position}-{voice.name}"
            site_split = "heldout" if w.word in self.heldout_words else split
            self.records.append(PairRecord(
                id=f"{tag}-physical", pair_kind="physical", kind=site.kind, contrast=site.contrast, text=text,
                sentence_id=sentence_id, word_index=w.index, word=w.word, site_position=site.position,
                nepali=site.nepali, hindi=site.hindi, query=self._save(f"{tag}-phys-alt", altered),
                control=self._save(f"{tag}-phys-sham", sham_span(reading.waveform, start, end)), reference=r_rel,
                voice=voice.name, split=site_split))
            self.stats.physical += 1
            added += 1
        return added

    def write(self, name: str = "pairs.jsonl") -> Path:
        path = self.out_dir / name
        write_manifest(path, self.records)
        return path


def ctc_confirmer(recognizer) -> Callable[[torch.Tensor, list[str], list[str]], bool]:
    """A confirmer: does ``recognizer`` prefer phones ``a`` over ``b`` on ``wave`` (CTC likelihood)?"""
    from leakloss.functional.ctc_paths import (
        ctc_set_log_likelihood,
        paths_from_token_sets,
    )

    def confirm(wave: torch.Tensor, a: list[str], b: list[str]) -> bool:
        sets = [[sorted(recognizer.phoneset.tokens(p)) for p in seq] for seq in (a, b)]
        allowed, lengths = paths_from_token_sets(sets, len(recognizer.vocab))
        with torch.no_grad():
            log_probs, frames = recognizer(wave[None])
        ll = ctc_set_log_likelihood(log_probs.expand(2, -1, -1), allowed, frames.expand(2), lengths, recognizer.blank)
        return bool(ll[0] > ll[1])

    return confirm


def filter_natural_pairs(manifest: str | Path, confirm, out_name: str = "pairs.confirmed.jsonl") -> tuple[Path, int]:
    """Keep a natural pair only if ``confirm`` (e.g. :func:`ctc_confirmer` of recognizer B) prefers the
    edited phones on the edited audio and the original phones on the original; other kinds pass.

    Lets the synthesis run before the confirming recognizer exists. Returns (new manifest, rejected).
    """
    from leakloss.pairs.features import load_pair_clip
    from leakloss.pairs.schema import read_manifest, resolve
    from leakloss.text.sites import SiteFinder

    manifest = Path(manifest)
    finder, keep, rejected = SiteFinder(), [], 0
    cache: dict[str, list] = {}
    for r in read_manifest(manifest):
        if r.pair_kind != "natural":
            keep.append(r)
            continue
        if r.text not in cache:
            cache[r.text] = [w for w in finder(r.text) if w.skipped is None]
        words = cache[r.text]
        k = next((i for i, w in enumerate(words) if w.index == r.word_index), None)
        site = None if k is None else next((s for s in words[k].sites if s.position == r.site_position), None)
        if site is None:  # was a bare StopIteration
            from leakloss.pairs.schema import ManifestError

            raise ManifestError(f"{manifest}: pair {r.id}: word {r.word_index} / site position {r.site_position} is "
                                "no site of its text")
        orig = [p for w in words for p in w.nepali]
        edit = [p for ws in edit_word([w.nepali for w in words], k, site) for p in ws]
        # at 16 kHz mono, as the recognizer hears (a 22.05 kHz file was heard slowed down, a stereo one as [t, 2])
        edited_wave = load_pair_clip(resolve(manifest, r.query))
        original_wave = load_pair_clip(resolve(manifest, r.control))
        if confirm(edited_wave, edit, orig) and confirm(original_wave, orig, edit):
            keep.append(r)
        else:
            rejected += 1
    out = manifest.with_name(out_name)
    write_manifest(out, keep)
    return out, rejected


def build_embedded_pairs(out_dir: str | Path, *, sentences: Sequence[str] | None = None, confirm=None,
                         max_sentences: int | None = None, seed: int = 0, progress: bool = True,
                         heldout_words: Sequence[str] = DEFAULT_HELDOUT_WORDS,
                         recorded_voices: Sequence[str] = (), heldout_recorded_voices: Sequence[str] = ()
                         ) -> tuple[Path, BuildStats]:
    """The embedded default: pairs from the built-in sentences with espeak voices.

    Sentences held out of recognizer training (the fixed 10% split) and read by the held-out voices
    give the ``heldout`` split; 10% of the rest give ``dev``; words in ``heldout_words`` are
    ``heldout`` wherever they occur. With ``recorded_voices`` (Festival/flite names), each training and dev
    sentence also gets physical pairs in one of them (drawn with the seed); each held-out sentence gets them in
    every voice of ``heldout_recorded_voices`` (e.g. the unseen family), so the held-out table has a block per
    voice family. ``max_sentences`` caps the build for quick runs: a quarter of them (at least one) held-out
    sentences, the rest training/dev ones, so a capped run still has pairs to train on.
    """
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.speech.synth import (
        HELDOUT_HINDI_VOICE,
        HELDOUT_TEACHER_VOICE,
        TRAIN_HINDI_VOICES,
        TRAIN_TEACHER_VOICES,
    )
    from leakloss.text.sites import SiteFinder

    # every recorded voice is resolved before any synthesis: an unknown, missing or excluded (NSK) one stops here
    voices = {name: _recorded_voice(name) for name in dict.fromkeys([*recorded_voices, *heldout_recorded_voices])}
    from leakloss.speech.festival import check_training_voice

    for name in recorded_voices:  # the training and dev pairs: never the unseen family (held-out pairs may be)
        check_training_voice(voices[name])
    all_sentences = list(sentences) if sentences is not None else builtin_sentences()
    train, held = split_sentences(all_sentences)
    rng = random.Random(seed)
    held_jobs = [(s, "heldout") for s in held]
    train_jobs = [(s, "dev" if rng.random() < 0.1 else "train") for s in train]
    if max_sentences is not None:  # a sample of both: a quarter held out (at least one), the rest to train on
        n_held = min(len(held_jobs), max(1, max_sentences // 4), max_sentences)
        held_jobs, train_jobs = held_jobs[:n_held], train_jobs[: max_sentences - n_held]
    jobs = held_jobs + train_jobs
    finder = SiteFinder()
    builder = PairBuilder(out_dir, confirm=confirm, heldout_words=heldout_words, seed=seed)
    for n, (text, split) in enumerate(tqdm(jobs, desc="building pairs", disable=not progress)):
        if split == "heldout":
            voice, ref_voice, hindi_voice = HELDOUT_TEACHER_VOICE, TRAIN_TEACHER_VOICES[n % 5], HELDOUT_HINDI_VOICE
        else:
            voice, ref_voice = rng.sample(list(TRAIN_TEACHER_VOICES), 2)
            hindi_voice = rng.choice(list(TRAIN_HINDI_VOICES))
        sid = f"s{all_sentences.index(text):04d}"
        words = finder(text)
        builder.add_sentence(sid, text, words, voice, ref_voice, hindi_voice, split)
        recorded = list(heldout_recorded_voices) if split == "heldout" else (
            [rng.choice(list(recorded_voices))] if recorded_voices else [])
        for name in recorded:
            builder.add_recorded_sentence(sid, text, words, voices[name], ref_voice, split)
    return builder.write(), builder.stats


def _recorded_voice(name: str):
    from leakloss.speech import festival

    voice = festival.get_voice(name)
    if not festival.voice_available(voice):
        raise festival.SynthesizerUnavailableError(f"voice {name} ({voice.debian_package}) is not installed")
    return voice
