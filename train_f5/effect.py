"""Does the training signal change how a TTS pronounces Nepali? The fine-tune experiment on the small Hindi-base F5.

:func:`run_effect` fine-tunes the Hindi base (``checkpoints/f5_hindi_base``: F5's ``DiT``/``CFM`` pretrained on
espeak ``hi``, see :mod:`train_f5`) on Nepali teacher readings, in four arms that start from the same weights and
share the seed, the batches and the number of updates:

- ``plain``: F5's flow-matching loss only;
- ``penalty``: plus ``leak_weight * t**2 * leak penalty(x1_hat)`` in the infilled span (:class:`LeakAwareCFM`,
  the shipped frame head on the recognizer its card names, wb), from update ``leak_start_step`` on (a warm-up on
  the plain loss);
- ``paired``: instead, plus ``paired_weight * t**2 * paired term(x1_hat, ground truth)``
  (:class:`leakloss.paired_penalty.PairedPosteriorPenalty` on ``paired_recognizer``: KL of the recognizer's frame
  posteriors on the vocoded ground truth and on the vocoded ``x1_hat`` inside each site's window), same schedule;
- ``margin`` (opt-in: not among the default arms, it costs the most): instead, plus ``margin_weight * t**2 * margin
  term(x1_hat, text)`` (:class:`leakloss.margin_penalty.PathMarginPenalty` on ``margin_recognizer``: the CTC fit of
  each site's Hindi-ward phone path minus its Nepali path, planned on the vocoded ground truth), same schedule;
- ``reward``: best-of-N distillation on *unpaired* text (rejection-sampling fine-tuning): every ``reward_every``
  updates the model says each reward text (phrases with a testable site, no test word, never recorded)
  ``reward_samples`` times; :func:`leakloss.reward.leak_reward_details` scores them (the worst reward for an
  unintelligible or unalignable sample); a text's best sample joins the training batches as a target when it
  is ``scored`` with reward at least ``reward_min``.

The judge never sees either signal's instrument: the scorer's deletion/quality heads on the real-speech
recognizer ``w`` (:data:`leakloss.heads.W_HEADS`) and its word check on ``w`` (the penalty and the reward use
recognizer wb). Each model says every test word (real
contrast sites, :func:`train_f5.data.is_test_word`, so never in any training text) in a phrase of up to three
words of its sentence, prompted by one fixed Nepali training reading; the scorer judges the phrase against two
espeak teacher readings and only the test word's sites count; ``per_*`` is ``w``'s greedy phone error rate (coarse
phones) against the phones the held-out teacher voice says; ``per_ceiling`` is the same on the vocoded ground
truth; ``flow_*`` is the flow-matching loss on the phrases' teacher readings (fixed noise).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from leakloss.constants import MEL_FLOOR, MEL_SAMPLE_RATE
from leakloss.speech import versions
from leakloss.timing import TimedSite
from train_f5.evaluate import CFG_STRENGTH, NFE

ARMS = ("plain", "penalty", "paired", "reward", "margin")
#: the arms a run trains unless told (the margin arm is asked for by name: it costs the most CPU)
DEFAULT_ARMS = ARMS[:4]
WORD_SPLITS = ("test", "validation")
#: Held-out words at the end of the hash order kept for choosing settings (never among the judged test words).
VALIDATION_WORDS = 48
REPO = Path(__file__).resolve().parents[1]


@dataclass
class EffectSettings:
    """One run of the experiment (defaults: one seed in about 4 minutes on 2 idle CPU cores)."""

    base_dir: str = str(REPO / "checkpoints" / "f5_hindi_base")
    cache_dir: str = str(REPO / ".cache" / "leakloss" / "f5_effect")
    finetune_texts: int = 240  # Nepali teacher phrases (1-3 words, no test word)
    test_words: int = 16
    #: "test" (the judged words) or "validation" (held-out words kept apart to choose settings on)
    words: str = "test"
    arms: tuple[str, ...] = DEFAULT_ARMS
    reward_texts: int = 8
    steps: int = 120
    lr: float = 2e-4
    warmup_steps: int = 20
    max_frames: int = 2400  # mel frames per batch
    pair_prob: float = 0.5  # share of items joining two same-voice readings (as the base was trained)
    #: both weights kept by a rule on the validation words (docs/f5_base.md, 2026-12-05): of 0.1 / 0.5 / 2.5 and
    #: 0.5 / 2.5 / 12.5, no other lowered the judge's site score within the quality bounds
    leak_weight: float = 0.1
    paired_weight: float = 0.5
    paired_recognizer: str = "wb"
    margin_weight: float = 0.5
    margin_recognizer: str = "wb"
    leak_start_step: int = 20  # every term
    #: share of each batch's items with sites that the terms score (the largest t), as finetune-f5's
    #: leak.item_fraction (1: every item; 0.25, its cost option, did not lower the validation site score)
    leak_item_fraction: float = 1.0
    reward_samples: int = 4  # N of best-of-N
    reward_every: int = 60
    reward_min: float = 0.5
    nfe: int = NFE
    cfg_strength: float = CFG_STRENGTH
    flow_repeats: int = 4
    seed: int = 0


@dataclass
class HeldOutWord:
    """A test word and the phrase the models say it in (its sentence neighbours: isolated words are too short
    for the scorer's word checks)."""

    word: str
    kinds: tuple[str, ...]  # contrast kinds of its testable sites
    phrase: str


@dataclass
class ArmResult:
    """The judge's figures for one model. ``flagged``: share of judged test words with a flagged site (None when
    none was judged); ``judged``: words the scorer scored (not quarantined, at least one site decided)."""

    per: float
    flagged: float | None
    judged: int
    flagged_by_kind: dict[str, float | None] = field(default_factory=dict)
    flow: float | None = None
    quarantined: int = 0
    accepted: int | None = None  # reward arm: targets kept
    minutes: float = 0.0
    #: seconds of the phrases said / of the ground truth's (F5 infills a fixed frame count: the prompt's frames per
    #: character, so every arm of one base says a phrase in the same time)
    duration_ratio: float | None = None
    #: the test words' site vowels, aligned by the judge's recognizer, summed over the sites placed in both the
    #: reading and the ground truth / the ground truth's (a signal that only lengthens vowels shows up here)
    vowel_ratio: float | None = None
    vowel_sites: int = 0
    #: the judge's mean leak score over the decided sites of the test words (a graded figure beside the flags:
    #: it moves where a share of a dozen flagged words cannot); None when none was decided
    site_score: float | None = None
    #: the signal's own view (not the judge): the reference-free penalty's mean site leak probability over the
    #: test words' sites in the phrases said, placed by its own recognizer (wb); None when none was placed. Beside
    #: ``site_score`` it says whether a gap between the penalty and the judge lies in the recognizers or in what
    #: the model says
    signal_score: float | None = None
    signal_sites: int = 0


# ---------------------------------------------------------------------------------------------------------------
# data


def load_base(base_dir: str | Path):
    """The shipped Hindi base (EMA weights + card) as a plain ``LeakAwareCFM``, without Hydra: ``(model,
    architecture keywords, card)``."""
    from safetensors.torch import load_file

    from integrations.f5_tts import written_architecture
    from train_f5.model import hindi_base_f5

    folder = Path(base_dir)
    card = json.loads((folder / "model.json").read_text(encoding="utf-8"))
    arch = {k: v for k, v in written_architecture(card["architecture"]).items() if k != "_target_"}
    model = hindi_base_f5(**arch)
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    return model, arch, card


def base_factory(base_dir: str | Path) -> tuple[Callable[..., Any], dict]:
    """``(make_model, card)``: ``make_model(seed=..., **leak) -> LeakAwareCFM`` holding the base's weights (each call
    a fresh copy), as :func:`integrations.f5_tts.penalty_comparison` builds its runs, and the base's card."""
    base, arch, card = load_base(base_dir)
    state = {k: v.clone() for k, v in base.state_dict().items()}

    def make_model(seed: int = 0, **leak):  # seed: penalty_comparison passes one; the weights are the base's
        return _fresh_base_model(arch, state, leak)

    return make_model, card


def held_out_words(n: int, sentences: Sequence[str] | None = None, split: str = "test") -> list[HeldOutWord]:
    """The first ``n`` held-out words (by hash order) with at least one testable contrast site, each in a phrase of
    up to three words of its first sentence (the word and its neighbours; no training text contains it).

    ``split``: ``"test"``, the words the experiment is judged on, or ``"validation"``, the last
    :data:`VALIDATION_WORDS` of the hash order (at most a third of the words), kept apart from every test split to
    choose the experiment's settings on (e.g. the penalty's weight); fewer than ``n`` when the split is smaller."""
    from leakloss.speech.corpus import split_text_words
    from leakloss.text.normalize import TextError
    from leakloss.text.sites import SiteFinder
    from train_f5.data import default_sentences, is_test_word

    if split not in WORD_SPLITS:
        raise ValueError(f"split must be one of {WORD_SPLITS}, got {split!r}")
    finder = SiteFinder()
    phrase_of: dict[str, str] = {}
    for sentence in sentences if sentences is not None else default_sentences():
        try:
            words = split_text_words(sentence)
        except TextError:
            continue
        for k, w in enumerate(words):
            if is_test_word(w) and w not in phrase_of:
                phrase_of[w] = " ".join(words[max(0, k - 1): k + 2])
    ranked = []
    for word in sorted(phrase_of, key=lambda w: hashlib.sha1(w.encode()).hexdigest()):
        found = [w for w in finder(word) if w.skipped is None]
        kinds = tuple(sorted({s.kind for w in found for s in w.testable_sites}))
        if kinds:
            ranked.append(HeldOutWord(word, kinds, phrase_of[word]))
    reserved = min(VALIDATION_WORDS, len(ranked) // 3)
    pool = ranked[len(ranked) - reserved:] if split == "validation" else ranked[: len(ranked) - reserved]
    return pool[:n]


def reward_texts(n: int, exclude: set[str], sentences: Sequence[str] | None = None, seed: int = 0) -> list[str]:
    """``n`` phrases (1-2 words) with a testable site, no test word and not among ``exclude``: unpaired text."""
    from leakloss.text.sites import SiteFinder
    from train_f5.data import default_sentences, phrases

    finder = SiteFinder()
    out = []
    for text in phrases(sentences if sentences is not None else default_sentences(), max_words=2, seed=seed + 1):
        if text in exclude:
            continue
        if any(w.testable_sites for w in finder(text) if w.skipped is None):
            out.append(text)
        if len(out) == n:
            break
    return out


def place_corpus_sites(corpus, penalty, vocoder, cache: Path | None = None) -> list[list[TimedSite]]:
    """Sites of every corpus item, placed by the penalty's recognizer on the vocoded ground truth (what the
    penalty hears of a perfect ``x1_hat``); cached as JSON beside the corpus."""
    if cache is not None and cache.is_file():
        return [[TimedSite(**s) for s in item] for item in json.loads(cache.read_text(encoding="utf-8"))]
    from leakloss.site_placement import place_sites

    out = []
    with torch.no_grad():
        for i in range(len(corpus)):
            wave = vocoder(corpus.mel(i)[None])[0]
            out.append(place_sites(wave, corpus.texts[i], penalty.recognizer))
    if cache is not None:
        from leakloss.atomic import write_text_atomic

        write_text_atomic(cache, json.dumps([[asdict(s) for s in item] for item in out], ensure_ascii=False))
    return out


# ---------------------------------------------------------------------------------------------------------------
# models and training


def arm_model(arch: dict, state: dict[str, Tensor], *, penalty=None, paired_penalty=None, margin_penalty=None,
              vocoder=None, leak_weight: float = 0.0, paired_weight: float = 0.0, margin_weight: float = 0.0,
              leak_start_step: int = 0, site_lookup=None, leak_item_fraction: float = 1.0):
    """A fresh model of the base's architecture ``arch`` (its card's) holding ``state``, with the reference-free
    penalty, the reference-paired term and/or the path-margin term when given (a ``LeakAwareCFM`` that vocodes
    ``x1_hat`` with ``vocoder``)."""
    leak = {}
    if penalty is not None:
        leak |= {"leak_penalty": penalty, "leak_weight": leak_weight}
    if paired_penalty is not None:
        leak |= {"paired_penalty": paired_penalty, "paired_weight": paired_weight}
    if margin_penalty is not None:
        leak |= {"margin_penalty": margin_penalty, "margin_weight": margin_weight}
    if leak:
        leak |= {"mel_to_wave": vocoder, "leak_start_step": leak_start_step, "site_lookup": site_lookup,
                 "leak_item_fraction": leak_item_fraction}
    return _fresh_base_model(arch, state, leak)


def _fresh_base_model(arch: dict, state: dict[str, Tensor], leak: dict):
    """A fresh ``hindi_base_f5(**arch, **leak)`` holding ``state``."""
    from train_f5.model import hindi_base_f5

    model = hindi_base_f5(**arch, **leak)
    model.load_state_dict(state)
    return model


def best_of_n(model, texts: Sequence[str], prompt: tuple[Tensor, str], penalty, vocoder, settings: EffectSettings,
              seed: int) -> list[tuple[Tensor, str, float]]:
    """Each text said ``reward_samples`` times; the best sample's ``(mel [n, 100], text, reward)`` for the texts
    whose best sample is ``scored`` with reward >= ``reward_min``. The caller's RNG stream is left untouched."""
    from leakloss.reward import leak_reward_details
    from train_f5.evaluate import infill, vocode_16k

    kept = []
    was_training = model.training
    model.eval()
    with torch.random.fork_rng():
        for t_i, text in enumerate(texts):
            mels = [infill(model, prompt[0], prompt[1], text, steps=settings.nfe, cfg_strength=settings.cfg_strength,
                           seed=seed * 100_003 + t_i * 101 + k) for k in range(settings.reward_samples)]
            details = leak_reward_details([vocode_16k(m, vocoder) for m in mels], [text] * len(mels), penalty)
            scored = [(d.reward, k) for k, d in enumerate(details) if d.status == "scored"]
            if scored:
                reward, k = max(scored)
                if reward >= settings.reward_min:
                    kept.append((mels[k], text, reward))
    model.train(was_training)
    return kept


def finetune(model, batches, settings: EffectSettings, *, seed: int, site_table: dict | None = None,
             reward=None) -> dict:
    """``settings.steps`` AdamW updates of ``model`` on ``batches``; ``site_table`` (text -> sites) is filled
    for the penalty's ``site_lookup``; ``reward(model, step) -> [(mel, text, r)]`` (the reward arm) is called at
    step 0 and every ``reward_every`` updates, its kept samples appended to each later batch (two a batch,
    cycling). ``seed`` seeds torch and Python's ``random`` (F5's ``CFM`` draws its CFG drops from the latter), so
    arms with the same seed see the same noise, times, spans and drops. Returns the losses, the targets kept and,
    per auxiliary term the model has (``leak``, ``paired``, ``margin``), what it measured at each update (None when it
    did not act)."""
    from integrations.f5_tts import AUXILIARY_TERMS

    random.seed(seed)
    torch.manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.01, betas=(0.9, 0.98))
    targets: list[tuple[Tensor, str]] = []
    losses, kept_total, cursor = [], 0, 0
    terms: dict[str, list[float | None]] = {name: [] for name in AUXILIARY_TERMS
                                            if getattr(model, f"{name}_penalty", None) is not None}
    model.train()
    for step in range(settings.steps):
        if reward is not None and step % settings.reward_every == 0:
            new = reward(model, step)
            kept_total += len(new)
            targets = [(m, t) for m, t, _ in new] or targets
        mel, lens, texts, sites = next(batches)
        if targets:
            extra = [targets[(cursor + j) % len(targets)] for j in range(min(2, len(targets)))]
            cursor += len(extra)
            mel, lens, texts = _append(mel, lens, texts, extra)
            sites = sites + [[] for _ in extra]
        if site_table is not None:
            site_table.update(zip(texts, sites))
        for group in opt.param_groups:
            group["lr"] = settings.lr * min(1.0, (step + 1) / settings.warmup_steps)
        loss, _, _ = model(mel, texts, lens=lens)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite fine-tune loss at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        for name, measured in terms.items():  # this update's value (None: not due, or no site in the span)
            got = getattr(model, f"last_{name}_penalty", None)
            measured.append(None if got is None else float(got))
    return {"losses": losses, "accepted": kept_total, **terms}


def _pad(mels: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """``[n_i, 100]`` mels -> (``[b, max n, 100]`` padded with F5's silence log mel, lengths ``[b]``)."""
    out = torch.full((len(mels), max(m.shape[0] for m in mels), mels[0].shape[1]), math.log(MEL_FLOOR))
    for k, m in enumerate(mels):
        out[k, : m.shape[0]] = m.detach()
    return out, torch.tensor([m.shape[0] for m in mels])


def _append(mel: Tensor, lens: Tensor, texts: list[str], extra: Sequence[tuple[Tensor, str]]):
    """The batch ``mel [b, n, 100]`` with the ``extra`` ``(mel, text)`` items appended."""
    return (*_pad([mel[k, : int(lens[k])] for k in range(mel.shape[0])] + [m for m, _ in extra]),
            texts + [t for _, t in extra])


@torch.no_grad()
def flow_loss(model, readings: Sequence[tuple[Tensor, str]], repeats: int, seed: int) -> float:
    """Mean flow-matching loss on ``readings`` (``(mel [n, 100], text)``), eval mode, fixed noise/time/span and CFG
    drops per repeat (the same for every model; torch's and Python's generators are left as they were)."""
    was_training = model.training
    model.eval()
    total = 0.0
    python_state = random.getstate()
    try:
        with torch.random.fork_rng():
            for r in range(repeats):
                torch.manual_seed(seed * 7919 + r)
                random.seed(seed * 7919 + r)  # F5's CFM draws its CFG drops (audio, text) from Python's random
                mel, lens = _pad([m for m, _ in readings])
                loss, _, _ = model(mel, [t for _, t in readings], lens=lens)
                total += float(loss)
    finally:
        random.setstate(python_state)
        model.train(was_training)
    return total / repeats


# ---------------------------------------------------------------------------------------------------------------
# the judge


def matched_vowel_seconds(sites: Sequence[TimedSite], truth: Sequence[TimedSite]) -> tuple[float, float, int]:
    """``(seconds in sites, seconds in truth, sites)`` over the sites of one word in a reading and in the ground truth,
    matched in order; nothing (0, 0, 0) when they do not match one to one by kind and contrast (an alignment failed
    or placed another site set)."""
    if len(sites) != len(truth) or any((a.kind, a.contrast) != (b.kind, b.contrast) for a, b in zip(sites, truth)):
        return 0.0, 0.0, 0
    return sum(a.end - a.start for a in sites), sum(b.end - b.start for b in truth), len(sites)


#: Bump when what :func:`kept_readings` stores changes.
KEPT_READINGS_VERSION = 1


def kept_readings(jobs: Sequence[tuple[str, Any, bool]], cache_dir: str | Path | None = None
                  ) -> list[tuple[Tensor, list[str]]]:
    """``(waveform, phones)`` of each ``(text, espeak voice, teacher)`` job: the teacher voice saying the Nepali
    frontend's phones of the text when ``teacher``, else the voice reading the text by its own rules.

    espeak-ng's output was not bit-stable (its pitch-flutter phase ran on between calls; its breathy variants still
    vary between processes: leakloss.speech._espeak), and the judge's flags moved by up to 0.035 a seed between two
    runs of the same models on it. With ``cache_dir`` the readings
    are synthesised once and kept in one file keyed by the jobs and the frontend's phones, so every later run
    judges against the very same references."""
    from leakloss.speech.corpus import split_text_words, teacher_reading
    from leakloss.speech.synth import speak_text
    from leakloss.text.frontend import NepaliFrontend

    frontend = NepaliFrontend()
    said = [[list(frontend.pronounce(w).phones) for w in split_text_words(text)] if teacher else None
            for text, _, teacher in jobs]
    path = None
    if cache_dir is not None:
        key = hashlib.sha256(json.dumps([KEPT_READINGS_VERSION, versions.espeak_version()]
                                        + [[t, v.name, p] for (t, v, _), p in zip(jobs, said)],
                                        ensure_ascii=False).encode()).hexdigest()[:16]
        path = Path(cache_dir) / f"readings-{key}.safetensors"
        if path.is_file():
            from safetensors import safe_open

            with safe_open(str(path), "pt") as f:
                waves, offsets = f.get_tensor("waves"), f.get_tensor("offsets").tolist()
                phones = json.loads(f.metadata()["phones"])
            return [(waves[a:b], p) for a, b, p in zip(offsets, offsets[1:], phones)]
    readings = [teacher_reading(t, v, frontend) if teacher else speak_text(t, v) for t, v, teacher in jobs]
    out = [(r.waveform, list(r.phones)) for r in readings]
    if path is not None:
        from safetensors.torch import save

        from leakloss.atomic import write_bytes_atomic

        offsets = [0]
        for wave, _ in out:
            offsets.append(offsets[-1] + wave.numel())
        tensors = {"waves": torch.cat([w for w, _ in out]).contiguous(), "offsets": torch.tensor(offsets)}
        write_bytes_atomic(path, save(tensors, metadata={"phones": json.dumps([p for _, p in out], ensure_ascii=False)}))
    return out


class Judge:
    """The scorer with its heads and word check on recognizer ``w`` (not the signal's wb) and ``w``'s phone error
    rate, on each test word's phrase (``waves`` keyed by the word); only the test word's own sites count. Its
    espeak references and ground truths are :func:`kept_readings` (kept in ``cache_dir`` when given)."""

    def __init__(self, words: Sequence[HeldOutWord], recognizer: str = "w",
                 cache_dir: str | Path | None = None) -> None:
        from leakloss.heads import W_HEADS
        from leakloss.scorer import Scorer
        from leakloss.speech.synth import HELDOUT_TEACHER_VOICE, TRAIN_TEACHER_VOICES

        self.words = list(words)
        self.scorer = Scorer(heads_dir=W_HEADS, check_recognizer=recognizer)
        self.recognizer = self.scorer.check_recognizer  # the same instance: w loads once
        voices = list(TRAIN_TEACHER_VOICES[:2]) + [HELDOUT_TEACHER_VOICE]
        said = iter(kept_readings([(w.phrase, v, True) for w in self.words for v in voices], cache_dir))
        readings = {w.word: [next(said) for _ in voices] for w in self.words}
        self.refs = {w: [wave for wave, _ in r[:-1]] for w, r in readings.items()}
        self.phones = {w: r[-1][1] for w, r in readings.items()}
        self.truth_waves = {w: r[-1][0] for w, r in readings.items()}
        self.truth_sites = {w.word: self.word_sites(self.truth_waves[w.word], w) for w in self.words}

    def word_sites(self, wave: Tensor, word: HeldOutWord) -> list[TimedSite]:
        """The test word's own sites in its phrase ``wave``, placed by the judge's recognizer."""
        from leakloss.site_placement import place_sites

        return [s for s in place_sites(wave, word.phrase, self.recognizer) if s.word == word.word]

    def __call__(self, waves: dict[str, Tensor]) -> ArmResult:
        from leakloss.scorer import corpus_phone_error_rate
        from leakloss.text.phones import coarse

        per = corpus_phone_error_rate(self.recognizer, [waves[w.word] for w in self.words],
                                      [self.phones[w.word] for w in self.words], phone_class=coarse)
        flags: list[bool] = []
        by_kind: dict[str, list[bool]] = {}
        scores: list[float] = []
        quarantined = 0
        for w in self.words:
            result = self.scorer.score(waves[w.word], w.phrase, self.refs[w.word])
            if result["status"] != "scored":
                quarantined += result["status"] == "quarantined"
                continue
            decided_sites = [s for word in result["words"] if word["word"] == w.word for s in word["sites"]
                             if s["decision"] in ("flagged", "no_change", "uncertain")]
            decided = [(s["kind"], s["decision"]) for s in decided_sites]
            if not decided:
                continue
            scores += [float(s["score"]) for s in decided_sites if s["score"] is not None]
            flags.append(any(d == "flagged" for _, d in decided))
            for kind in {k for k, _ in decided}:
                by_kind.setdefault(kind, []).append(any(d == "flagged" for k, d in decided if k == kind))
        share = (sum(flags) / len(flags)) if flags else None
        seconds = sum(waves[w.word].shape[-1] for w in self.words) / sum(
            self.truth_waves[w.word].shape[-1] for w in self.words)
        said = truth_s = 0.0
        vowel_sites = 0
        for w in self.words:
            a, b, n = matched_vowel_seconds(self.word_sites(waves[w.word], w), self.truth_sites[w.word])
            said, truth_s, vowel_sites = said + a, truth_s + b, vowel_sites + n
        return ArmResult(per=per, flagged=share, judged=len(flags), quarantined=quarantined,
                         flagged_by_kind={k: sum(v) / len(v) for k, v in sorted(by_kind.items())},
                         duration_ratio=seconds, vowel_ratio=said / truth_s if truth_s > 0 else None,
                         vowel_sites=vowel_sites, site_score=sum(scores) / len(scores) if scores else None)


def signal_view(penalty, waves: dict[str, Tensor], words: Sequence[HeldOutWord]) -> tuple[float | None, int]:
    """``(mean site leak probability, sites)`` of the reference-free ``penalty`` (a
    :class:`leakloss.penalty.LeakPenalty`) on each test word's phrase ``waves[word]``: the test word's own sites,
    placed on the phrase by the penalty's recognizer; phrases whose phones do not align give none. (None, 0) when
    no site was placed."""
    from leakloss.functional.leak import peak_limited
    from leakloss.site_placement import locate_sites

    probs: list[Tensor] = []
    with torch.no_grad():
        for w in words:
            placed = locate_sites(waves[w.word], w.phrase, penalty.recognizer)
            sites = [s for s in placed.sites if s.word == w.word] if placed.status == "placed" else []
            if not sites:
                continue
            _, parts = penalty(waves=peak_limited(waves[w.word])[None], sites=[sites])
            probs.append(parts.site_probs[parts.site_active].float())
    found = torch.cat(probs) if probs else torch.zeros(0)
    return (float(found.mean()) if found.numel() else None), int(found.numel())


def say_words(model, words: Sequence[HeldOutWord], prompt: tuple[Tensor, str], vocoder, settings: EffectSettings
              ) -> dict[str, Tensor]:
    """Each test word's phrase said by ``model`` (seeded per word, the same seeds for every model), 16 kHz, keyed
    by the word."""
    from train_f5.evaluate import infill, vocode_16k

    was_training = model.training
    model.eval()
    out = {}
    with torch.random.fork_rng():
        for i, w in enumerate(words):
            mel = infill(model, prompt[0], prompt[1], w.phrase, steps=settings.nfe, cfg_strength=settings.cfg_strength,
                         seed=settings.seed * 1000 + i)
            out[w.word] = vocode_16k(mel, vocoder)
    model.train(was_training)
    return out


# ---------------------------------------------------------------------------------------------------------------
# the experiment


def run_effect(settings: EffectSettings, seeds: Sequence[int] = (0,), log=print) -> dict:
    """The whole experiment; ``{"ceiling": ArmResult, "hindi_truth": ArmResult (vocoded espeak hi readings: a
    perfect Hindi base), "base": ArmResult, "arms": {arm: [ArmResult per seed]},
    "settings": ..., "test_words": [...]}``. Arms are trained from the same base for every seed (the seed sets
    the batches, the flow-matching noise and the reward samples)."""
    import torchaudio.functional as AF

    from leakloss.constants import SAMPLE_RATE
    from leakloss.margin_penalty import PathMarginPenalty
    from leakloss.paired_penalty import PairedPosteriorPenalty
    from leakloss.penalty import LeakPenalty
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES
    from leakloss.vocoder import MelToWave, log_mel
    from train_f5.data import build_corpus, default_sentences, joined_batches, phrases

    unknown = [a for a in settings.arms if a not in ARMS]
    if unknown or not settings.arms:
        raise ValueError(f"arms must be a non-empty subset of {ARMS}, got {settings.arms!r}")
    from integrations.f5_tts import AUXILIARY_TERMS, check_item_fraction

    check_item_fraction(settings.leak_item_fraction)  # before the base and the corpus are loaded
    start = time.time()
    cache = Path(settings.cache_dir)
    base, arch, card = load_base(settings.base_dir)
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    vocoder = MelToWave.embedded()
    penalty = LeakPenalty.load()
    paired = PairedPosteriorPenalty.load(settings.paired_recognizer)
    margin = PathMarginPenalty.load(settings.margin_recognizer) if "margin" in settings.arms else None
    words = held_out_words(settings.test_words, split=settings.words)
    texts = [t for t in phrases(default_sentences(), max_words=3, seed=settings.seed) if len(t.split()) <= 3]
    texts = texts[: settings.finetune_texts]
    corpus = build_corpus(texts, TRAIN_TEACHER_VOICES, cache, progress=False, teacher=True)
    key = hashlib.sha256(json.dumps([corpus.texts, corpus.voices, penalty.recognizer.name],
                                    ensure_ascii=False).encode()).hexdigest()[:16]
    sites = place_corpus_sites(corpus, penalty, vocoder, cache / f"sites-{key}.json")
    items = [(corpus.mel(i), corpus.texts[i], sites[i]) for i in range(len(corpus))]
    unpaired = reward_texts(settings.reward_texts, set(corpus.texts))
    heldout = build_corpus([w.phrase for w in words], TRAIN_TEACHER_VOICES[:1], cache, progress=False, teacher=True)
    readings = [(heldout.mel(i), heldout.texts[i]) for i in range(len(heldout))]
    prompt = (corpus.mel(0), corpus.texts[0])
    log(f"data: {len(corpus)} fine-tune readings ({sum(map(len, sites))} sites), {len(words)} {settings.words} words, "
        f"{len(unpaired)} reward texts, base step {card.get('steps')} ({time.time() - start:.0f}s)")

    def vocoded(wave: Tensor) -> Tensor:  # a 16 kHz reading through F5's mel and the vocoder, as a TTS says it
        return vocoder(log_mel(AF.resample(wave, SAMPLE_RATE, MEL_SAMPLE_RATE)[None]))[0]

    judge = Judge(words, cache_dir=cache)

    def assess(waves: dict[str, Tensor]) -> ArmResult:  # the judge's figures, and the signal's own view beside them
        result = judge(waves)
        result.signal_score, result.signal_sites = signal_view(penalty, waves, words)
        return result

    truth = {w: vocoded(x) for w, x in judge.truth_waves.items()}
    ceiling = assess(truth)
    log(f"ceiling (vocoded ground truth): PER {ceiling.per:.3f}, flagged {_fmt(ceiling.flagged)} of {ceiling.judged}, "
        f"site vowels {_fmt(ceiling.vowel_ratio)} of the ground truth's ({ceiling.vowel_sites} sites), the signal's own "
        f"{_fmt(ceiling.signal_score)} on {ceiling.signal_sites} sites")
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE

    hindi_said = kept_readings([(w.phrase, HELDOUT_HINDI_VOICE, False) for w in words], cache)
    hindi = {w.word: vocoded(wave) for w, (wave, _) in zip(words, hindi_said)}
    hindi_truth = assess(hindi)  # what a base that says its training data (espeak hi) perfectly would score
    log(f"Hindi ground truth (vocoded espeak hi): PER {hindi_truth.per:.3f}, flagged {_fmt(hindi_truth.flagged)} of "
        f"{hindi_truth.judged}, the signal's own {_fmt(hindi_truth.signal_score)} on {hindi_truth.signal_sites} sites")
    base_result = assess(say_words(base, words, prompt, vocoder, settings))
    base_result.flow = flow_loss(base, readings, settings.flow_repeats, settings.seed)
    log(f"base: PER {base_result.per:.3f}, flagged {_fmt(base_result.flagged)} of {base_result.judged} judged, "
        f"{base_result.quarantined} quarantined, flow {base_result.flow:.4f}, duration {_fmt(base_result.duration_ratio)} "
        f"and site vowels {_fmt(base_result.vowel_ratio)} of the ground truth's ({base_result.vowel_sites} sites)")

    arms: dict[str, list[ArmResult]] = {a: [] for a in settings.arms}
    for seed in seeds:
        for arm in settings.arms:
            t0 = time.time()
            table: dict[str, list[TimedSite]] = {}
            terms = {"penalty": {"penalty": penalty, "leak_weight": settings.leak_weight},
                     "paired": {"paired_penalty": paired, "paired_weight": settings.paired_weight},
                     "margin": {"margin_penalty": margin, "margin_weight": settings.margin_weight}}.get(arm, {})
            if terms:
                terms |= {"leak_start_step": settings.leak_start_step, "leak_item_fraction": settings.leak_item_fraction,
                          "site_lookup": lambda t, table=table: table.get(t, [])}
            model = arm_model(arch, base_state, vocoder=vocoder, **terms)
            reward = None
            if arm == "reward":
                def reward(m, step, seed=seed):
                    return best_of_n(m, unpaired, prompt, penalty, vocoder, settings, seed=seed * 1000 + step)
            batches = joined_batches(corpus.voices, items.__getitem__, settings.max_frames, settings.pair_prob, seed)
            trained = finetune(model, batches, settings, seed=seed, site_table=table, reward=reward)
            result = assess(say_words(model, words, prompt, vocoder, settings))
            # on a plain copy: an eval-mode LeakAwareCFM with a penalty would add the penalty to the loss
            result.flow = flow_loss(arm_model(arch, model.state_dict()), readings, settings.flow_repeats, settings.seed)
            result.accepted = trained["accepted"] if arm == "reward" else None
            result.minutes = (time.time() - t0) / 60
            arms[arm].append(result)
            log(f"seed {seed} {arm}: PER {result.per:.3f}, flagged {_fmt(result.flagged)} of {result.judged} judged "
                f"({result.flagged_by_kind}, mean site score {_fmt(result.site_score)}; the signal's own "
                f"{_fmt(result.signal_score)} on {result.signal_sites} sites), flow {result.flow:.4f}, site vowels {_fmt(result.vowel_ratio)} of the "
                f"ground truth's ({result.vowel_sites} sites), final loss {trained['losses'][-1]:.3f}"
                + (f", {result.accepted} reward targets kept" if arm == "reward" else "")
                + "".join(f", {name} term {_term_trend(trained[name])}" for name in AUXILIARY_TERMS if name in trained)
                + f" ({result.minutes:.1f} min)")
    return {"ceiling": ceiling, "hindi_truth": hindi_truth, "base": base_result, "arms": arms,
            "settings": asdict(settings),
            "test_words": [asdict(w) for w in words], "seeds": list(seeds), "minutes": (time.time() - start) / 60}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _term_trend(values: Sequence[float | None]) -> str:
    """An auxiliary term's mean over the first and the last quarter of the updates it acted on."""
    xs = [v for v in values if v is not None]
    if not xs:
        return "never acted"
    q = max(1, len(xs) // 4)
    return f"{sum(xs[:q]) / q:.3f} -> {sum(xs[-q:]) / q:.3f} ({len(xs)} updates)"


def mean_interval(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """Mean and 95% Student-t interval of the non-None values (the interval is the mean itself for one value);
    None when there are none."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, m, m
    from scipy import stats

    half = stats.t.ppf(0.975, len(xs) - 1) * stats.tstd(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


__all__ = [
    "ARMS",
    "DEFAULT_ARMS",
    "VALIDATION_WORDS",
    "WORD_SPLITS",
    "ArmResult",
    "EffectSettings",
    "HeldOutWord",
    "Judge",
    "arm_model",
    "best_of_n",
    "finetune",
    "flow_loss",
    "held_out_words",
    "load_base",
    "mean_interval",
    "place_corpus_sites",
    "reward_texts",
    "run_effect",
    "say_words",
    "signal_view",
]
