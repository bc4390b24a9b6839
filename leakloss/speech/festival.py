"""Recorded-speech voices: Festival (diphone, clunits, HTS) and flite (diphone, clustergen) from Debian.

What these add to espeak: how voices built from human recordings sound on the phones Nepali shares
with their languages. Every reading is a :class:`leakloss.speech.synth.Reading` (16 kHz mono float32)
whose phones, start and end times come from the synthesizer's own ``Segment`` relation (Festival:
``item.feat "end"``; flite: ``-psdur``), mapped onto the recognizers' phone inventory (the canonical
labels of :func:`leakloss.text.phones.canonical`). Every segment is kept in ``Reading.segments``
with its own name; a phone with no counterpart in the inventory is **dropped from the target**
(``label=None``, kept in ``segments`` and counted in ``dropped``), never relabelled.

A Nepali word is said through phone input (:func:`speak_phones`): each Nepali phone becomes the
voice's nearest phone(s) (tables ``NEPALI_TO_VOICE``, below), put in the voice's lexicon as a new
word (Festival: ``lex.add.entry``, so the voice's own duration and intonation models run) or given
as a phone string (flite ``-p``). The label is always what the voice *said*, read back from its
segments: Italian ``a`` standing in for Nepali ``ʌ`` is labelled ``aː``, not ``ʌ``.

The NSK Indic voices and the packages that pull them in (the one list that names them:
:data:`EXCLUDED_PACKAGES`) are kept for independent evaluation: this module refuses them
(:class:`ExcludedVoiceError`) and never lists them.

Voice phone -> inventory label (``-`` = dropped from the target; silence symbols are skipped):

=========  ==========================================================================================
phone set  mapping (voice phone = IPA -> label)
=========  ==========================================================================================
radio /    aa ɑ->aː · ae æ->- · ah ʌ->ʌ · ao ɔ->ɔː · aw aʊ->ʌu̯ · ax ə->ʌ · axr ɚ->- · ay aɪ->ʌi̯ ·
cmu (US    eh ɛ->ɛː · el l̩->l · em m̩->m · en n̩->n · er ɝ->- · ey eɪ->e · ih ɪ->i · iy i->i ·
English)   ow oʊ->o · oy ɔɪ->- · uh ʊ->u · uw u->u · b d f k l m n p s t z -> same · g->ɡ ·
           ch tʃ->c · jh dʒ->ɟ · dh ð->- · th θ->- · dx ɾ->r · hh/hv->h · ng->ŋ · nx ɾ̃->n ·
           r ɹ->r (the rhotic) · sh->ʃ · v->w (the w/ʋ/v class) · w->w · y->j · zh ʒ->-
italian    a/a1->aː · e/e1->e · E/E1 ɛ->ɛː · i/i1->i · o/o1->o · O/O1 ɔ->ɔː · u/u1->u · j w -> same ·
           p t k b d f s m n l r z -> same · g->ɡ · S->ʃ · v->w · ts/tS->c · dz/dZ->ɟ · J->ɲ ·
           ng->ŋ · nf ɱ->- · L ʎ->- · Z ʒ->-
czech      a/a:->aː · e/e: (ɛ)->ɛː · i/i:->i · o/o:->o · u/u:->u · b d f j k l m n p r s t z ->
           same · g->ɡ · c ts->c · c~ tʃ->c · t~ (palatal c)->c · d~ ɟ->ɟ · dz/dz~->ɟ · n~->ɲ ·
           n* ŋ->ŋ · h ɦ->h · ch x->- · r~/r~* (ř)->- · s~->ʃ · z~ ʒ->- · v->w
finnish    a/a: (ɑ)->aː · e/e:->e · i/i:->i · o/o:->o · u/u:->u · y ø æ (y 7 @, long too)->- ·
           & ->- · long consonants (p: ...) -> the short label · p t k b d f s h m n l r j -> same ·
           g->ɡ · N->ŋ · S->ʃ · v ʋ->w · w->w · T θ->- · D: ð->- · L ʎ->- · z:->z · Z: ʒ->- ·
           t S in one word (its tʃ)->c, over both segments' times
msu_ru     aa/a (ɐ)->aː / ʌ · ee/e->e · ii/i->i · oo->o · uu/u->u · yy/y ɨ->- · ae ay ur (reduced)
(Russian)  ->- · palatalised consonants (pp bb ...) -> the plain label (palatalisation dropped) ·
           c ts->c · ch tɕ->c · sh ʂ->ʂ · sch ɕː->- · zh ʐ->- · h/hh x->- · v/vv->w · j->j
upc_       ax ə->ʌ · a/a1->aː · e/e1->e · E/E1->ɛː · i/i1->i · o/o1->o · O/O1->ɔː · u/u1->u ·
catalan    j w p t k b d f s m n l z -> same · g->ɡ · r ɾ->r · rr->r · S->ʃ · J->ɲ · L ʎ->- · Z->- ·
           t S / d Z in one word (its affricates tʃ, dʒ)->c / ɟ, over both segments' times
=========  ==========================================================================================

Nepali phone -> voice phone for phone input (aspiration and nasalisation are not phones of these
voices: ``kʰ`` is said ``k``, ``ã`` is said ``a``, and labelled so; retroflex stops ʈ ɖ ɳ ɽ are said
as the voice's t d n r). Phones a voice lacks outright (``h`` in Italian and Catalan) are left unsaid
and listed in ``Reading.unsaid``. Where the set has no single phone, the nearest sequence is said:

=========  ==========================================================================================
phone set  Nepali -> voice (the consonants not listed are said as the same letter: k ɡ t d n p b m ...)
=========  ==========================================================================================
radio      ʌ->ah · aː->aa · i->iy · u->uw · e->ey · o->ow · ʌi̯->ay · ʌu̯->aw · c->ch · ɟ->jh · ɲ->n ·
           ŋ->ng · j->y · r ɽ->r · ʃ ʂ->sh · h->hh
italian    ʌ aː->a · ʌi̯->a j · ʌu̯->a w · c->tS · ɟ->dZ · ɲ->J · ŋ->ng · ʃ ʂ->S · h->(unsaid)
czech      ʌ->a · aː->a: · ʌi̯->a j · ʌu̯->a u · c->c~ · ɟ->dz~ · ɲ->n~ · ŋ->n* · w->v · ʃ ʂ->s~
finnish    ʌ->a · aː->a: · ʌi̯->a i · ʌu̯->a u · c->t S · ɟ->d j · ɲ->n · ŋ->N · w->v · ʃ ʂ->S · z->s
catalan    ʌ->ax · aː->a · ʌi̯->a j · ʌu̯->a w · c->t S · ɟ->d Z · ɲ->J · ŋ->n · ʃ ʂ->S · h->(unsaid)
=========  ==========================================================================================

The Russian voice (``msu_ru_nsh_clunits``) ignores lexicon additions, so it only reads Russian text
(:func:`speak_text`); flite's ``awb_time`` (a talking clock) and flite's Indic language support (no
voice ships for it in Debian) are not used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF

from leakloss.speech import versions
from leakloss.speech.synth import SAMPLE_RATE, Reading
from leakloss.text.phones import strip_nasal

CACHE_VERSION = 1
#: How segments become labels; a corpus of recorded readings is rebuilt when it changes (readings cached by
#: :func:`speak_phones` are relabelled on load). 2: affricate pairs (:data:`AFFRICATES`) labelled as one phone.
LABELS_VERSION = 2

#: Debian packages and voice names reserved for independent evaluation: never installed, never used.
EXCLUDED_PACKAGES = frozenset({"festvox-hi-nsk", "festvox-mr-nsk", "festvox-te-nsk",
                               "festival-hi", "festival-mr", "festival-te"})
_EXCLUDED_NAME = re.compile(r"nsk", re.IGNORECASE)


class SynthesizerUnavailableError(RuntimeError):
    """Festival / flite (or the asked voice) is not installed on this machine."""


class ExcludedVoiceError(ValueError):
    """The voice is one of the NSK Indic voices kept for independent evaluation."""


class SynthesisError(RuntimeError):
    """The synthesizer ran but its output could not be read back as labelled phones."""


@dataclass(frozen=True)
class RecordedVoice:
    """One Festival or flite voice: ``engine`` + its own voice name, the phone set it speaks and the
    kind of synthesizer (``family``: the unit of a held-out "unseen family")."""

    name: str
    engine: str  # "festival" | "flite"
    voice_id: str
    phoneset: str
    language: str
    family: str  # "festival-diphone" | "festival-clunits" | "festival-hts" | "flite-diphone" | "flite-clustergen"
    debian_package: str
    phone_input: bool = True  # False: the voice ignores lexicon additions (reads only its own text)

    def __post_init__(self) -> None:
        check_allowed(self.voice_id)
        check_allowed(self.debian_package)
        if not re.fullmatch(r"[A-Za-z0-9_]+", self.voice_id):
            # pasted into Festival's Scheme as (voice_ID): any other character could build another voice's name at
            # run time ("kal_diphone) (eval ...") that no check here ever sees
            raise ValueError(f"voice_id {self.voice_id!r} must be letters, digits and '_' only")


def check_allowed(name: str) -> None:
    """Raise :class:`ExcludedVoiceError` for an NSK voice or package (in any case, with any spaces around it)."""
    if name.strip().casefold() in EXCLUDED_PACKAGES or _EXCLUDED_NAME.search(name):
        raise ExcludedVoiceError(
            f"{name!r} is an NSK Indic voice (leakloss.speech.festival.EXCLUDED_PACKAGES): kept for independent "
            "evaluation, never used here")


#: The voices this module knows (all installable from Debian bookworm; none is NSK).
VOICES: tuple[RecordedVoice, ...] = (
    RecordedVoice("fest-kal", "festival", "kal_diphone", "radio", "en", "festival-diphone", "festvox-kallpc16k"),
    RecordedVoice("fest-ked", "festival", "ked_diphone", "radio", "en", "festival-diphone", "festvox-kdlpc16k"),
    RecordedVoice("fest-slt", "festival", "cmu_us_slt_arctic_hts", "radio", "en", "festival-hts", "festvox-us-slt-hts"),
    RecordedVoice("fest-ona", "festival", "upc_ca_ona_hts", "upc_catalan-central", "ca", "festival-hts",
                  "festvox-ca-ona-hts"),
    RecordedVoice("fest-it-lp", "festival", "lp_diphone", "italian", "it", "festival-diphone", "festvox-italp16k"),
    RecordedVoice("fest-it-pc", "festival", "pc_diphone", "italian", "it", "festival-diphone", "festvox-itapc16k"),
    RecordedVoice("fest-cs-dita", "festival", "czech_dita", "czech", "cs", "festival-diphone", "festvox-czech-dita"),
    RecordedVoice("fest-cs-krb", "festival", "czech_krb", "czech", "cs", "festival-diphone", "festvox-czech-krb"),
    RecordedVoice("fest-cs-machac", "festival", "czech_machac", "czech", "cs", "festival-diphone",
                  "festvox-czech-machac"),
    RecordedVoice("fest-cs-ph", "festival", "czech_ph", "czech", "cs", "festival-diphone", "festvox-czech-ph"),
    RecordedVoice("fest-fi-lj", "festival", "suo_fi_lj_diphone", "finnish", "fi", "festival-diphone",
                  "festvox-suopuhe-lj"),
    RecordedVoice("fest-fi-mv", "festival", "hy_fi_mv_diphone", "finnish", "fi", "festival-diphone",
                  "festvox-suopuhe-mv"),
    RecordedVoice("fest-ru-nsh", "festival", "msu_ru_nsh_clunits", "msu_ru", "ru", "festival-clunits", "festvox-ru",
                  phone_input=False),
    RecordedVoice("flite-kal16", "flite", "kal16", "radio", "en", "flite-diphone", "flite"),
    RecordedVoice("flite-awb", "flite", "awb", "radio", "en", "flite-clustergen", "flite"),
    RecordedVoice("flite-rms", "flite", "rms", "radio", "en", "flite-clustergen", "flite"),
    RecordedVoice("flite-slt", "flite", "slt", "radio", "en", "flite-clustergen", "flite"),
)
VOICES_BY_NAME = {v.name: v for v in VOICES}

#: The synthesizer family kept out of every shipped model's training for good: the HTS voices (statistical
#: parametric voices trained on recordings). flite's ``slt`` is the same speaker as Festival's HTS ``slt``
#: (CMU ARCTIC), so it is kept out with them; what the shipped models hear of that family is unseen.
UNSEEN_FAMILY = "festival-hts"
UNSEEN_SPEAKER_TWINS = ("flite-slt",)
#: Voices a shipped recognizer may train on: phone input, not of the unseen family, not a twin of it.
TRAINING_VOICES: tuple[str, ...] = tuple(v.name for v in VOICES if v.phone_input and v.family != UNSEEN_FAMILY
                                         and v.name not in UNSEEN_SPEAKER_TWINS)
UNSEEN_VOICES: tuple[str, ...] = tuple(v.name for v in VOICES if v.family == UNSEEN_FAMILY)


def check_training_voice(voice: RecordedVoice) -> None:
    """``ValueError`` unless ``voice`` is one of :data:`TRAINING_VOICES` exactly as registered (a hand-built voice
    naming itself a training voice, or of the unseen family or its twin under any name, is refused): the unseen
    family stays out of every training corpus, whatever a caller builds."""
    registered = VOICES_BY_NAME.get(getattr(voice, "name", None))
    if registered is None or voice != registered or voice.name not in TRAINING_VOICES:
        kept = voice.family == UNSEEN_FAMILY or voice.name in UNSEEN_SPEAKER_TWINS or any(
            voice.voice_id == VOICES_BY_NAME[n].voice_id and voice.engine == VOICES_BY_NAME[n].engine
            for n in (*UNSEEN_VOICES, *UNSEEN_SPEAKER_TWINS))
        why = "of the unseen family (or its speaker twin), kept out of every training corpus" if kept else \
            "not one of the registered training voices"
        raise ValueError(f"recorded voice {getattr(voice, 'name', voice)!r} is {why}; training voices: "
                         f"{', '.join(TRAINING_VOICES)}")


def get_voice(name: str) -> RecordedVoice:
    check_allowed(name)
    if name not in VOICES_BY_NAME:
        raise KeyError(f"unknown recorded voice {name!r}; known: {', '.join(VOICES_BY_NAME)}")
    return VOICES_BY_NAME[name]


# --- phone sets: voice phone -> inventory label (None: dropped from the target) ---------------------

_RADIO = {
    "aa": "aː", "ae": None, "ah": "ʌ", "ao": "ɔː", "aw": "ʌu̯", "ax": "ʌ", "axr": None, "ay": "ʌi̯",
    "b": "b", "ch": "c", "d": "d", "dh": None, "dx": "r", "eh": "ɛː", "el": "l", "em": "m", "en": "n",
    "er": None, "ey": "e", "f": "f", "g": "ɡ", "hh": "h", "hv": "h", "ih": "i", "iy": "i", "jh": "ɟ", "k": "k",
    "l": "l", "m": "m", "n": "n", "nx": "n", "ng": "ŋ", "ow": "o", "oy": None, "p": "p", "r": "r", "s": "s",
    "sh": "ʃ", "t": "t", "th": None, "uh": "u", "uw": "u", "v": "w", "w": "w", "y": "j", "z": "z", "zh": None,
}
_ITALIAN = {
    **{v: lab for base, lab in (("a", "aː"), ("e", "e"), ("E", "ɛː"), ("i", "i"), ("o", "o"), ("O", "ɔː"), ("u", "u"))
       for v in (base, base + "1")},
    "j": "j", "w": "w", "p": "p", "t": "t", "k": "k", "b": "b", "d": "d", "g": "ɡ", "f": "f", "s": "s", "S": "ʃ",
    "v": "w", "z": "z", "Z": None, "ts": "c", "tS": "c", "dz": "ɟ", "dZ": "ɟ", "m": "m", "n": "n", "J": "ɲ",
    "ng": "ŋ", "nf": None, "l": "l", "L": None, "r": "r",
}
_CZECH = {
    "a": "aː", "a:": "aː", "e": "ɛː", "e:": "ɛː", "i": "i", "i:": "i", "o": "o", "o:": "o", "u": "u", "u:": "u",
    "b": "b", "c": "c", "c~": "c", "ch": None, "d": "d", "d~": "ɟ", "dz": "ɟ", "dz~": "ɟ", "f": "f", "g": "ɡ",
    "h": "h", "j": "j", "k": "k", "l": "l", "m": "m", "n": "n", "n*": "ŋ", "n~": "ɲ", "p": "p", "r": "r",
    "r~": None, "r~*": None, "s": "s", "s~": "ʃ", "t": "t", "t~": "c", "v": "w", "z": "z", "z~": None,
}
_FINNISH_BASE = {
    "a": "aː", "e": "e", "i": "i", "o": "o", "u": "u", "y": None, "@": None, "7": None, "&": None,
    "p": "p", "t": "t", "k": "k", "b": "b", "d": "d", "g": "ɡ", "f": "f", "T": None, "D": None, "s": "s",
    "z": "z", "S": "ʃ", "Z": None, "h": "h", "v": "w", "m": "m", "n": "n", "N": "ŋ", "l": "l", "L": None,
    "r": "r", "j": "j", "w": "w",
}
# suopuhe's phones: short and long (":") forms; some exist only long (z: D: Z:), "&" only short
_FINNISH = {p: _FINNISH_BASE[p.rstrip(":")] for p in (
    "a e i o u y @ 7 & a: e: i: o: u: y: @: 7: p t k b d g f T s S h v m n N l L r j w p: t: k: b: d: g: f: T: "
    "D: s: z: S: Z: h: v: m: n: N: w: l: L: r: j:").split()}
_RUSSIAN = {
    "ii": "i", "yy": None, "uu": "u", "ee": "e", "oo": "o", "aa": "aː", "a": "ʌ", "e": "e", "i": "i", "y": None,
    "u": "u", "ae": None, "ay": None, "ur": None, "c": "c", "ch": "c", "sh": "ʂ", "sch": None, "zh": None,
    "h": None, "hh": None, "j": "j",
    **{c + suffix: lab for c, lab in (("p", "p"), ("b", "b"), ("t", "t"), ("d", "d"), ("k", "k"), ("g", "ɡ"),
                                      ("f", "f"), ("v", "w"), ("s", "s"), ("z", "z"), ("m", "m"), ("n", "n"),
                                      ("l", "l"), ("r", "r")) for suffix in ("", c)},
}
_CATALAN = {
    "ax": "ʌ", "a": "aː", "a1": "aː", "e": "e", "e1": "e", "E": "ɛː", "E1": "ɛː", "i": "i", "i1": "i", "o": "o",
    "o1": "o", "O": "ɔː", "O1": "ɔː", "u": "u", "u1": "u", "j": "j", "w": "w", "p": "p", "t": "t", "k": "k",
    "b": "b", "d": "d", "g": "ɡ", "f": "f", "s": "s", "S": "ʃ", "z": "z", "Z": None, "m": "m", "n": "n",
    "J": "ɲ", "l": "l", "L": None, "r": "r", "rr": "r",
}

#: Two voice phones said as one inventory phone. The Catalan and Finnish sets have no affricate phone: their
#: [tʃ] is the sequence ``t S`` and Catalan [dʒ] is ``d Z`` (its own lexicon: ``cotxe`` = ``k o1 t S ax``,
#: ``platja`` = ``p l a1 d Z ax``), which is how phone input says Nepali c and ɟ. The pair within one word is
#: labelled as the one affricate it sounds as (the inventory's c / ɟ, over both segments' times), not as a
#: stop plus a fricative.
AFFRICATES: dict[str, dict[tuple[str, str], str]] = {
    "upc_catalan-central": {("t", "S"): "c", ("d", "Z"): "ɟ"},
    "finnish": {("t", "S"): "c"},
}

#: phone set -> {voice phone: inventory label or None (dropped from the target)}
VOICE_PHONES: dict[str, dict[str, str | None]] = {
    "radio": _RADIO, "italian": _ITALIAN, "czech": _CZECH, "finnish": _FINNISH, "msu_ru": _RUSSIAN,
    "upc_catalan-central": _CATALAN,
}
#: silence / boundary symbols of each phone set (skipped: neither a label nor a dropped phone)
SILENCES: dict[str, frozenset[str]] = {
    "radio": frozenset({"pau", "h#", "brth"}), "italian": frozenset({"#", "pau"}), "czech": frozenset({"#", "_"}),
    "finnish": frozenset({"#", "##"}), "msu_ru": frozenset({"pau"}), "upc_catalan-central": frozenset({"pau", "_", "#"}),
}
#: vowels of each phone set (syllable nuclei for the lexicon entries of phone input)
_VOWELS: dict[str, frozenset[str]] = {
    "radio": frozenset({"aa", "ae", "ah", "ao", "aw", "ax", "axr", "ay", "eh", "er", "ey", "ih", "iy", "ow", "oy",
                        "uh", "uw"}),
    "italian": frozenset(p for p in _ITALIAN if p[0] in "aeEioOu"),
    "czech": frozenset({"a", "a:", "e", "e:", "i", "i:", "o", "o:", "u", "u:"}),
    "finnish": frozenset(p for p in _FINNISH if p[0] in "aeiouy@7&"),
    "upc_catalan-central": frozenset(p for p in _CATALAN if p[0] in "aeEioOu"),
}

# --- Nepali phone -> the voice's nearest phone(s), for phone input ----------------------------------

_NE_COMMON = {  # consonants shared by the Latin-script phone sets (the set-specific ones override below)
    "k": ("k",), "kʰ": ("k",), "ɡ": ("g",), "ɡʰ": ("g",), "ʈ": ("t",), "ʈʰ": ("t",), "ɖ": ("d",), "ɖʰ": ("d",),
    "ɳ": ("n",), "t": ("t",), "tʰ": ("t",), "d": ("d",), "dʰ": ("d",), "n": ("n",), "p": ("p",), "pʰ": ("p",),
    "b": ("b",), "bʰ": ("b",), "m": ("m",), "j": ("j",), "r": ("r",), "l": ("l",), "s": ("s",), "h": ("h",),
    "ɽ": ("r",), "ɽʰ": ("r",), "f": ("f",), "z": ("z",), "w": ("w",),
}
#: The Hindi vowels a quality pair's donor word needs (not Nepali phones), where the set has the open-mid vowel;
#: Finnish has neither, Czech no open o: their quality sites are skipped (and counted) by the pair builder.
_HINDI_VOWELS = {
    "radio": {"ɛː": ("eh",), "ɛ": ("eh",), "ɔː": ("ao",), "ɔ": ("ao",)},
    "italian": {"ɛː": ("E",), "ɛ": ("E",), "ɔː": ("O",), "ɔ": ("O",)},
    "czech": {"ɛː": ("e",), "ɛ": ("e",)},
    "finnish": {},
    "upc_catalan-central": {"ɛː": ("E",), "ɛ": ("E",), "ɔː": ("O",), "ɔ": ("O",)},
}
NEPALI_TO_VOICE: dict[str, dict[str, tuple[str, ...]]] = {
    "radio": {
        **_NE_COMMON, "ʌ": ("ah",), "aː": ("aa",), "i": ("iy",), "u": ("uw",), "e": ("ey",), "o": ("ow",),
        "ʌi̯": ("ay",), "ʌu̯": ("aw",), "ŋ": ("ng",), "c": ("ch",), "cʰ": ("ch",), "ɟ": ("jh",), "ɟʰ": ("jh",),
        "ɲ": ("n",), "j": ("y",), "ʃ": ("sh",), "ʂ": ("sh",), "h": ("hh",),
    },
    "italian": {
        **_NE_COMMON, "ʌ": ("a",), "aː": ("a",), "i": ("i",), "u": ("u",), "e": ("e",), "o": ("o",),
        "ʌi̯": ("a", "j"), "ʌu̯": ("a", "w"), "ŋ": ("ng",), "c": ("tS",), "cʰ": ("tS",), "ɟ": ("dZ",),
        "ɟʰ": ("dZ",), "ɲ": ("J",), "ʃ": ("S",), "ʂ": ("S",), "h": (),
    },
    "czech": {
        **_NE_COMMON, "ʌ": ("a",), "aː": ("a:",), "i": ("i",), "u": ("u",), "e": ("e",), "o": ("o",),
        "ʌi̯": ("a", "j"), "ʌu̯": ("a", "u"), "ŋ": ("n*",), "c": ("c~",), "cʰ": ("c~",), "ɟ": ("dz~",),
        "ɟʰ": ("dz~",), "ɲ": ("n~",), "w": ("v",), "ʃ": ("s~",), "ʂ": ("s~",),
    },
    "finnish": {
        **_NE_COMMON, "ʌ": ("a",), "aː": ("a:",), "i": ("i",), "u": ("u",), "e": ("e",), "o": ("o",),
        "ʌi̯": ("a", "i"), "ʌu̯": ("a", "u"), "ŋ": ("N",), "c": ("t", "S"), "cʰ": ("t", "S"), "ɟ": ("d", "j"),
        "ɟʰ": ("d", "j"), "ɲ": ("n",), "w": ("v",), "ʃ": ("S",), "ʂ": ("S",), "z": ("s",),
    },
    "upc_catalan-central": {
        **_NE_COMMON, "ʌ": ("ax",), "aː": ("a",), "i": ("i",), "u": ("u",), "e": ("e",), "o": ("o",),
        "ʌi̯": ("a", "j"), "ʌu̯": ("a", "w"), "ŋ": ("n",), "c": ("t", "S"), "cʰ": ("t", "S"), "ɟ": ("d", "Z"),
        "ɟʰ": ("d", "Z"), "ɲ": ("J",), "ʃ": ("S",), "ʂ": ("S",), "h": (),
    },
}
for _set, _extra in _HINDI_VOWELS.items():
    NEPALI_TO_VOICE[_set].update(_extra)


def voice_phones_for(nepali: list[str], phoneset: str) -> tuple[list[str], list[str]]:
    """One word of Nepali phones -> (the voice's phones, the Nepali phones left unsaid)."""
    table = NEPALI_TO_VOICE.get(phoneset)
    if table is None:
        raise ValueError(f"phone set {phoneset!r} has no Nepali phone-input table")
    out, unsaid = [], []
    for phone in nepali:
        base = strip_nasal(phone)
        if base not in table:
            raise KeyError(f"no {phoneset} phone for Nepali phone {phone!r}")
        said = table[base]
        if not said:
            unsaid.append(phone)
        out.extend(said)
    return out, unsaid


# --- the reading ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Segment:
    """One segment the synthesizer output: its own phone name, times (s), word (-1: pause) and label."""

    name: str
    start: float
    end: float
    word: int
    label: str | None
    joined: bool = False  # said with the segment before it as one phone (an affricate): that one has the label


@dataclass
class VoiceReading(Reading):
    """A :class:`Reading` plus the synthesizer's own segments (dropped phones included)."""

    segments: list[Segment] = field(default_factory=list)
    unsaid: list[str] = field(default_factory=list)  # Nepali phones the voice has no phone for

    @property
    def dropped(self) -> list[Segment]:
        return [s for s in self.segments if s.label is None and s.word >= 0 and not s.joined]


def _label(phone: str, phoneset: str) -> str | None:
    table = VOICE_PHONES[phoneset]
    if phone not in table:
        raise SynthesisError(f"{phoneset} phone {phone!r} is not in the mapping table")
    return table[phone]


def label_segments(segs: list[tuple[str, float, float, int]], phoneset: str) -> list[Segment]:
    """(voice phone, start, end, word or -1) -> :class:`Segment` with inventory labels: silences unlabelled
    (word -1), an :data:`AFFRICATES` pair in one word labelled once (on its first segment, the second
    ``joined``), every other phone by :data:`VOICE_PHONES`."""
    silences, pairs = SILENCES[phoneset], AFFRICATES.get(phoneset, {})
    out: list[Segment] = []
    for name, start, end, word in segs:
        if name in silences:
            out.append(Segment(name, start, end, -1, None))
            continue
        prev = out[-1] if out else None
        if prev is not None and not prev.joined and prev.word == word and (prev.name, name) in pairs:
            out[-1] = Segment(prev.name, prev.start, prev.end, prev.word, pairs[(prev.name, name)])
            out.append(Segment(name, start, end, word, None, joined=True))
            continue
        out.append(Segment(name, start, end, word, _label(name, phoneset)))
    return out


def _voice_reading(wave: torch.Tensor, segments: list[Segment], word_spans: list, unsaid: list[str]) -> VoiceReading:
    """The reading of labelled ``segments``: its phones are the labelled ones, a joined pair ending where its
    second segment ends."""
    labels, starts, ends, words = [], [], [], []
    for s in segments:
        if s.joined and labels:
            ends[-1] = s.end
        elif s.label is not None:
            labels.append(s.label)
            starts.append(s.start)
            ends.append(s.end)
            words.append(s.word)
    return VoiceReading(wave, labels, starts, words, word_spans, phone_ends=ends, segments=segments, unsaid=unsaid)


def _make_reading(wave: np.ndarray, rate: int, segs: list[tuple[str, float, float, int]], phoneset: str,
                  n_words: int, unsaid: list[str]) -> VoiceReading:
    """``segs``: (voice phone, start, end, word or -1) in seconds at the native rate."""
    w = torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))
    if w.dim() > 1:
        w = w.mean(-1)
    if rate != SAMPLE_RATE:
        w = AF.resample(w, rate, SAMPLE_RATE)
    duration = w.numel() / SAMPLE_RATE
    segments = label_segments([(name, min(start, duration), min(end, duration), word)
                               for name, start, end, word in segs], phoneset)
    spans = []
    for k in range(n_words):
        mine = [s for s in segments if s.word == k]
        spans.append((mine[0].start, mine[-1].end) if mine else (float("nan"), float("nan")))
    return _voice_reading(w, segments, spans, unsaid)


# --- engines -----------------------------------------------------------------------------------------

def festival_available() -> bool:
    return shutil.which("festival") is not None


def flite_available() -> bool:
    return shutil.which("flite") is not None


def voice_available(voice: RecordedVoice) -> bool:
    """The voice's engine is installed and (Festival) lists it."""
    if voice.engine == "flite":
        if not flite_available():
            return False
        try:
            out = subprocess.run(["flite", "-lv"], capture_output=True, text=True, timeout=30).stdout
        except subprocess.TimeoutExpired:
            raise SynthesizerUnavailableError("flite did not list its voices within 30 s (`flite -lv` hangs)") from None
        return voice.voice_id in out.split()
    return festival_available() and voice.voice_id in festival_voices()


_FESTIVAL_VOICES: list[str] | None = None


def festival_voices() -> list[str]:
    """The voices Festival lists (NSK voices never appear here, even if installed by someone else)."""
    global _FESTIVAL_VOICES
    if _FESTIVAL_VOICES is None:
        if not festival_available():
            raise SynthesizerUnavailableError("festival is not installed (apt-get install festival festvox-...)")
        out = _run_festival("(format t \"VOICES %l\\n\" (voice.list))\n")
        m = re.search(r"VOICES \((.*)\)", out)
        names = m.group(1).split() if m else []
        _FESTIVAL_VOICES = [n for n in names if not _EXCLUDED_NAME.search(n)]
    return list(_FESTIVAL_VOICES)


def festival_phoneset(voice: RecordedVoice) -> tuple[str, list[str]]:
    """(phone set name, its phones) as the Festival voice itself declares them."""
    check_allowed(voice.voice_id)
    out = _run_festival(f"(voice_{voice.voice_id})\n(format t \"PHONESET %s %l\\n\" (Param.get 'PhoneSet) "
                        "(mapcar car (cadr (assoc 'phones (PhoneSet.description '(phones))))))\n", voice=voice)
    m = re.search(r"PHONESET (\S+) \((.*)\)", out)
    if m is None:
        raise SynthesisError(f"festival did not describe the phone set of {voice.name}")
    return m.group(1), m.group(2).split()


#: Seconds one synthesizer run may take; a hung run becomes a :class:`SynthesisError`, which callers skip.
SYNTH_TIMEOUT_S = 120

#: The scripts (first word of a letter's Unicode name) each voice language's text front end reads; the
#: others are written in Latin letters. Festival's English front end dies by SIGSEGV on Devanagari.
_LANGUAGE_SCRIPTS = {"ru": ("CYRILLIC",)}
_LANGUAGE_NAMES = {"en": "English", "ca": "Catalan", "it": "Italian", "cs": "Czech", "fi": "Finnish", "ru": "Russian"}


def _foreign_letters(text: str, language: str) -> list[str]:
    """The letters and marks of ``text`` in no script ``language`` is written in, once each, in text order
    (digits, spaces and punctuation are read by every front end; combining accents go with any letter)."""
    scripts = _LANGUAGE_SCRIPTS.get(language, ("LATIN",)) + ("COMBINING",)
    return list(dict.fromkeys(c for c in text if unicodedata.category(c)[0] in "LM"
                              and not unicodedata.name(c, "").startswith(scripts)))


def _input_size(text: str) -> str:
    return f" on a text of {len(text)} characters" if text else ""


def _failure(who: str, returncode: int, output: str, *, text: str = "", language: str = "") -> SynthesisError:
    """One sentence on a failed run: its exit status or the signal that killed it, that it printed
    nothing (a crash often does), the likely cause when the text is in a script the voice cannot read,
    and last (it may run over lines) what it printed."""
    if returncode < 0:
        try:
            how = f"was killed by signal {-returncode} ({signal.Signals(-returncode).name})"
        except ValueError:  # not a signal this platform names
            how = f"was killed by signal {-returncode}"
    else:
        how = f"failed (exit {returncode})"
    output = output.strip()[-500:]
    message = f"{who} {how}{'' if output else ' with no error output'}{_input_size(text)}"
    foreign = _foreign_letters(text, language) if language else []
    if foreign:
        scripts = sorted({unicodedata.name(c, "UNKNOWN").split()[0].title() for c in foreign})
        letters = [c for c in foreign if unicodedata.category(c)[0] == "L"] or foreign  # a lone vowel sign reads badly
        shown = " ".join(letters[:8]) + (" ..." if len(letters) > 8 else "")
        message += (f"; likely cause: the text has {'/'.join(scripts)} letters ({shown}) that the "
                    f"{_LANGUAGE_NAMES.get(language, language)} voice cannot read")
    if output:
        message += f"; it printed: {output}"
    return SynthesisError(message)


def _run_festival(script: str, timeout: float = SYNTH_TIMEOUT_S, *, voice: RecordedVoice | None = None,
                  text: str = "") -> str:
    """Run a Scheme script in ``festival --batch``; ``voice`` and ``text`` (what the script has it read)
    only name the run in errors. Every file of the run is in a temporary directory, removed on any error."""
    who = f"festival voice {voice.name}" if voice is not None else "festival"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.scm"
        path.write_text(script, encoding="utf-8")
        try:
            proc = subprocess.run(["festival", "--batch", str(path)], capture_output=True, timeout=timeout)
        except FileNotFoundError as err:
            raise SynthesizerUnavailableError("festival is not installed") from err
        except subprocess.TimeoutExpired as err:  # subprocess.run has killed it by now
            raise SynthesisError(f"{who} timed out after {timeout:g} s{_input_size(text)}") from err
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0 or "SIOD ERROR" in out:
        raise _failure(who, proc.returncode, out + proc.stderr.decode("utf-8", "replace"),
                       text=text, language=voice.language if voice is not None else "")
    return out


def _scheme_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _word_name(k: int) -> str:
    """A made-up word for the k-th input word, in no lexicon: ascii letters with vowels in it (a word
    without vowels is spelled out letter by letter by the Italian and Finnish tokenizers)."""
    syllables = ""
    while True:
        k, r = divmod(k, 5)
        syllables = "zo" + "aeiou"[r] + syllables
        if not k:
            return "qu" + syllables


def _syllables(phones: list[str], vowels: frozenset[str]) -> list[tuple[list[str], int]]:
    """Split phones into syllables (one vowel each; of two or more consonants between vowels the first
    closes the syllable before); first syllable stressed, the way Nepali stresses words."""
    nuclei = [i for i, p in enumerate(phones) if p in vowels]
    if not nuclei:
        return [(list(phones), 1)]
    cuts = [0]
    for a, b in zip(nuclei, nuclei[1:]):
        between = b - a - 1
        cuts.append(a + 1 + (1 if between >= 2 else 0))
    cuts.append(len(phones))
    return [(phones[s:e], 1 if i == 0 else 0) for i, (s, e) in enumerate(zip(cuts, cuts[1:])) if e > s]


_SEG_SCHEME = """
(set! llw_i 0)
(mapcar (lambda (w) (item.set_feat w "llw" llw_i) (set! llw_i (+ llw_i 1))) (utt.relation.items utt 'Word))
(mapcar (lambda (s) (format t "SEG\\t%s\\t%f\\t%s\\n" (item.name s) (item.feat s "end")
                            (item.feat s "R:SylStructure.parent.parent.llw")))
        (utt.relation.items utt 'Segment))
(utt.save.wave utt {wav} 'riff)
"""


def _festival_synth(voice: RecordedVoice, body: str,
                    text: str) -> tuple[np.ndarray, int, list[tuple[str, float, float, int]]]:
    """Run ``body`` (which sets ``utt`` from ``text``) in the voice; the audio goes to a temporary
    directory, removed on any error, so a killed or timed-out run leaves no partial file."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "out.wav"
        script = f"(voice_{voice.voice_id})\n" + body + _SEG_SCHEME.format(wav=_scheme_string(str(wav)))
        out = _run_festival(script, voice=voice, text=text)
        if not wav.exists():
            raise SynthesisError(f"festival wrote no audio for voice {voice.name}")
        audio, rate = sf.read(wav, dtype="float32")
    segs, prev = [], 0.0
    for line in out.splitlines():
        if not line.startswith("SEG\t"):
            continue
        _, name, end, word = line.split("\t")
        end = float(end)
        segs.append((name, prev, end, int(float(word)) if re.fullmatch(r"-?\d+(\.\d+)?", word) else -1))
        prev = end
    if not segs:
        raise SynthesisError(f"festival returned no segments for voice {voice.name}")
    return audio, rate, segs


def _flite_synth(voice: RecordedVoice, phones: list[str]) -> tuple[np.ndarray, int, list[tuple[str, float, float]]]:
    # the audio goes to a temporary directory, removed on any error: a killed run leaves no partial file
    phone_string = " ".join(phones)
    who = f"flite voice {voice.name}"
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "out.wav"
        try:
            proc = subprocess.run(["flite", "-voice", voice.voice_id, "-psdur", "-p", phone_string, "-o", str(wav)],
                                  capture_output=True, text=True, timeout=SYNTH_TIMEOUT_S)
        except FileNotFoundError as err:
            raise SynthesizerUnavailableError("flite is not installed") from err
        except subprocess.TimeoutExpired as err:  # subprocess.run has killed it by now
            raise SynthesisError(f"{who} timed out after {SYNTH_TIMEOUT_S:g} s on a phone string of "
                                 f"{len(phone_string)} characters ({len(phones)} phones)") from err
        if proc.returncode != 0:
            raise _failure(who, proc.returncode, proc.stderr)
        if not wav.exists():
            raise SynthesisError(f"{who} exited 0 but wrote no audio: {proc.stderr.strip()[-300:] or 'no error output'}")
        audio, rate = sf.read(wav, dtype="float32")
    segs, prev = [], 0.0
    for tok in proc.stdout.split():
        name, _, end = tok.rpartition(":")
        segs.append((name, prev, float(end)))
        prev = float(end)
    return audio, rate, segs


def voice_version(voice: RecordedVoice) -> str:
    """The version of what makes ``voice``'s audio: its engine (``festival --version``, ``flite --version``) and
    its Debian package (the voice's data; flite's voices are built into it). Read once per process
    (:mod:`leakloss.speech.versions`); ``unknown`` where it cannot be read."""
    engine = versions.festival_version() if voice.engine == "festival" else versions.flite_version()
    return f"{voice.engine} {engine}; {voice.debian_package} {versions.debian_package_version(voice.debian_package)}"


def _cache_path(cache_dir: str | os.PathLike | None, voice: RecordedVoice, mode: str, payload) -> Path | None:
    if cache_dir is None:
        return None
    # the synthesizer's version: an upgraded Festival, flite or voice package reused the old one's audio
    key = hashlib.sha256(json.dumps([CACHE_VERSION, voice.name, voice.voice_id, mode, payload, voice_version(voice)],
                                    ensure_ascii=False).encode()).hexdigest()[:20]
    return Path(cache_dir) / f"{voice.name}-{key}"


def _load_cached(path: Path | None, phoneset: str) -> VoiceReading | None:
    """A stored reading, its labels made anew from the segment names (a mapping fix reaches cached audio)."""
    if path is None or not (path.with_suffix(".json")).exists():
        return None
    meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    wave, rate = sf.read(path.with_suffix(".wav"), dtype="float32")
    assert rate == SAMPLE_RATE
    segments = label_segments([(name, start, end, word) for name, start, end, word, *_ in meta["segments"]], phoneset)
    return _voice_reading(torch.from_numpy(wave), segments, [tuple(x) for x in meta["word_spans"]], meta["unsaid"])


def _store(path: Path | None, r: VoiceReading) -> VoiceReading:
    if path is None:
        return r
    from leakloss.atomic import write_text_atomic
    from leakloss.audio import save_audio

    path.parent.mkdir(parents=True, exist_ok=True)
    # atomic, and a symlink at a cache name is replaced, never written through
    save_audio(path.with_suffix(".wav"), r.waveform, SAMPLE_RATE, subtype="FLOAT")
    meta = {"segments": [[s.name, s.start, s.end, s.word, s.label] for s in r.segments],
            "word_spans": [list(x) for x in r.word_spans], "unsaid": r.unsaid}
    # the JSON last: a half-written entry is never read
    write_text_atomic(path.with_suffix(".json"), json.dumps(meta, ensure_ascii=False))
    return r


def speak_voice_phones(words: list[list[str]], voice: RecordedVoice, *, unsaid: list[str] | None = None,
                       cache_dir: str | os.PathLike | None = None) -> VoiceReading:
    """Speak words given in the voice's own phone set (e.g. radio ``[["hh", "ah", "l", "ow"]]``)."""
    check_allowed(voice.voice_id)
    if not voice.phone_input:
        raise ValueError(f"voice {voice.name} takes no phone input (it reads only its own text)")
    words = [list(w) for w in words]
    if not any(words):
        raise ValueError("nothing to speak: no phones given")
    known = VOICE_PHONES[voice.phoneset]
    for w in words:
        for p in w:
            if p not in known:
                raise KeyError(f"{p!r} is not a phone of {voice.phoneset} (voice {voice.name})")
    unsaid = list(unsaid or [])
    # the unsaid phones are part of the reading: a key on the voice phones alone gave the previous call's unsaid
    # (written as before when there are none, so the caches of the readings without any stay valid)
    path = _cache_path(cache_dir, voice, "phones", [words, unsaid] if unsaid else words)
    cached = _load_cached(path, voice.phoneset)
    if cached is not None and cached.unsaid == unsaid:  # (an entry written under the old key: made anew)
        return cached
    spoken = [w for w in words if w]
    if voice.engine == "festival":
        entries = []
        for k, w in enumerate(spoken):
            sylls = " ".join(f"(({' '.join(s)}) {stress})" for s, stress in _syllables(w, _VOWELS[voice.phoneset]))
            entries.append(f"(lex.add.entry '(\"{_word_name(k)}\" nil ({sylls})))")
        text = " ".join(_word_name(k) for k in range(len(spoken)))
        body = ("(set! postlex_vowel_reduce_cart_tree nil)\n"  # the English voices would reduce unstressed vowels
                + "\n".join(entries)
                + f"\n(set! utt (utt.synth (Utterance Text {_scheme_string(text)})))\n")
        audio, rate, segs = _festival_synth(voice, body, text)
    else:
        flat = ["pau"] + [p for w in spoken for p in w] + ["pau"]
        audio, rate, raw = _flite_synth(voice, flat)
        if [s[0] for s in raw] != flat:  # flite keeps the given phones; anything else would misplace words
            raise SynthesisError(f"flite said {[s[0] for s in raw]} for {flat}")
        owner = [-1] + [k for k, w in enumerate(spoken) for _ in w] + [-1]
        segs = [(n, a, b, k) for (n, a, b), k in zip(raw, owner)]
    _check_said(voice, segs, spoken)
    return _store(path, _make_reading(audio, rate, segs, voice.phoneset, len(spoken), unsaid))


def _edit_distance(a: list[str], b: list[str]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def _check_said(voice: RecordedVoice, segs: list[tuple[str, float, float, int]], spoken: list[list[str]]) -> None:
    """The voice said every given word, each close to the phones given. Its own postlexical rules may
    change a few (Czech final devoicing: ``b`` -> ``p``): the labels come from what it said, but a word
    spelled out letter by letter or lost would misplace every label after it."""
    silences = SILENCES[voice.phoneset]
    said = [[s[0] for s in segs if s[3] == k and s[0] not in silences] for k in range(len(spoken))]
    stray = [s[0] for s in segs if s[0] not in silences and not 0 <= s[3] < len(spoken)]
    for k, (want, got) in enumerate(zip(spoken, said)):
        if stray or _edit_distance(want, got) > max(1, len(want) // 3):
            raise SynthesisError(f"voice {voice.name} said {got} for word {k} {want} (outside the words: {stray})")


def speak_phones(words: list[list[str]], voice: RecordedVoice, *,
                 cache_dir: str | os.PathLike | None = None) -> VoiceReading:
    """Say Nepali words (project IPA phones, as the frontend gives them) through the voice's phone input:
    each phone becomes the voice's nearest phone(s) (``NEPALI_TO_VOICE``); labels are what it said."""
    if not words or not any(words):
        raise ValueError("nothing to speak: no phones given")
    mapped, unsaid = [], []
    for k, w in enumerate(words):
        phones, missing = voice_phones_for(list(w), voice.phoneset)
        if w and not phones:  # said as no word at all, it would shift every later word's index and span
            # a SynthesisError: the pair and corpus builders skip the sentence, as for any reading the voice fails
            raise SynthesisError(f"word {k} {list(w)}: {voice.name} has no phone for any of its phones")
        mapped.append(phones)
        unsaid.extend(missing)
    return speak_voice_phones(mapped, voice, unsaid=unsaid, cache_dir=cache_dir)


def speak_text(text: str, voice: RecordedVoice, *, cache_dir: str | os.PathLike | None = None) -> VoiceReading:
    """A Festival voice reading text in its own language with its own rules (flite: phone input only)."""
    check_allowed(voice.voice_id)
    from leakloss.speech.synth import check_speakable

    check_speakable(text)
    if voice.engine != "festival":
        raise ValueError(f"{voice.name}: text reading is only wired for Festival voices (flite has no word times)")
    foreign = _foreign_letters(text, voice.language)
    if foreign:  # refused up front: some voices crash on them, others spell each one out as "unknown"
        raise ValueError(f"{voice.name} reads {_LANGUAGE_NAMES.get(voice.language, voice.language)} text; the text "
                         f"has letters it cannot read ({' '.join(foreign[:8])}): give Nepali as phones "
                         "(speak_phones) instead")
    path = _cache_path(cache_dir, voice, "text", text)
    cached = _load_cached(path, voice.phoneset)
    if cached is not None:
        return cached
    audio, rate, segs = _festival_synth(voice, f"(set! utt (utt.synth (Utterance Text {_scheme_string(text)})))\n",
                                        text)
    n_words = max((s[3] for s in segs if s[0] not in SILENCES[voice.phoneset]), default=-1) + 1
    return _store(path, _make_reading(audio, rate, segs, voice.phoneset, n_words, []))


def nepali_phone_spans(reading: VoiceReading, voice: RecordedVoice,
                       words: list[list[str]]) -> list[list[tuple[float, float] | None]]:
    """Where each Nepali phone of ``words`` was said in a :func:`speak_phones` reading: per word, per phone,
    (start, end) in seconds over the voice segments that said it, or None (left unsaid, or a word the voice
    said with more or fewer segments than given, so they cannot be matched one to one)."""
    spoken = [list(w) for w in words if w]
    out: list[list[tuple[float, float] | None]] = []
    silences = SILENCES[voice.phoneset]
    for k, word in enumerate(spoken):
        per_phone = [voice_phones_for([p], voice.phoneset)[0] for p in word]
        segs = [s for s in reading.segments if s.word == k and s.name not in silences]
        # the voice's own postlexical rules may change a phone (Czech voicing assimilation k -> g, Italian
        # j -> i) without adding or losing one: segments still match the given phones one to one, in order
        if len(segs) != sum(len(said) for said in per_phone):
            out.append([None] * len(word))
            continue
        spans, i = [], 0
        for said in per_phone:
            spans.append((segs[i].start, segs[i + len(said) - 1].end) if said else None)
            i += len(said)
        out.append(spans)
    return out
