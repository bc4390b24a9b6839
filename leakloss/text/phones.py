"""The project's phone inventory: espeak-style IPA, shared by the Nepali frontend, the Hindi side,
the teacher voice and the recognizers.

Phones are IPA strings in the style espeak-ng (and ``facebook/wav2vec2-*-espeak-cv-ft``) writes them:
one string per phone, diacritics attached (``bʰ``, ``aː``, ``ʌi̯``). The Nepali frontend emits only
phones listed in :data:`NEPALI_PHONES`; the Hindi side is whatever espeak's ``hi`` voice says, cleaned
by :func:`clean_espeak_ipa`.
"""

from __future__ import annotations

import unicodedata

#: Nepali vowels the frontend emits. ``ʌ`` is the inherent vowel (अ). Nepali has no phonemic length
#: contrast in i/u, so इ/ई are both ``i`` and उ/ऊ both ``u``. ऐ/औ are diphthongs.
NEPALI_VOWELS: tuple[str, ...] = ("ʌ", "aː", "i", "u", "e", "o", "ʌi̯", "ʌu̯")

#: Nepali consonants, written as espeak writes the Devanagari letters (च=c, ज=ɟ: the recognizers'
#: inventory; consonants are never contrast sites, so the phonetic detail does not matter here).
NEPALI_CONSONANTS: tuple[str, ...] = (
    "k", "kʰ", "ɡ", "ɡʰ", "ŋ",
    "c", "cʰ", "ɟ", "ɟʰ", "ɲ",
    "ʈ", "ʈʰ", "ɖ", "ɖʰ", "ɳ",
    "t", "tʰ", "d", "dʰ", "n",
    "p", "pʰ", "b", "bʰ", "m",
    "j", "r", "l", "w", "s", "ʃ", "ʂ", "h",
    "ɽ", "ɽʰ", "f", "z",
)

#: Nasalised vowels: the vowel with U+0303 attached (चन्द्रबिन्दु, or अनुस्वार where no consonant follows).
NASAL = "\u0303"

NEPALI_PHONES: frozenset[str] = frozenset(
    NEPALI_VOWELS + NEPALI_CONSONANTS + tuple(v + NASAL for v in NEPALI_VOWELS)
)

#: Vowel symbols of either language (for "is this a vowel").
VOWEL_BASES: frozenset[str] = frozenset(
    {"ʌ", "ə", "ɐ", "a", "aː", "i", "iː", "ɪ", "u", "uː", "ʊ", "e", "eː", "ɛ", "ɛː", "o", "oː", "ɔ", "ɔː",
     "ʌi̯", "ʌu̯", "ʌɪ", "ʌʊ", "aɪ", "aʊ", "əi", "əu", "ɜ", "ɚ"}
)

#: Symbols a recognizer may use for the same phone. A phone maps to the union of its class: ``ʌ, ə, ɐ``
#: are one open central vowel; length and small quality variants of i/u/e/o/a are one phone.
EQUIVALENCE_CLASSES: tuple[frozenset[str], ...] = (
    frozenset({"ʌ", "ə", "ɐ", "ɜ"}),
    frozenset({"a", "aː", "ä"}),
    frozenset({"i", "iː", "ɪ"}),
    frozenset({"u", "uː", "ʊ"}),
    frozenset({"e", "eː"}),
    frozenset({"o", "oː"}),
    frozenset({"ɛ", "ɛː"}),
    frozenset({"ɔ", "ɔː"}),
    frozenset({"ʌi̯", "ʌɪ", "əi", "aɪ", "ʌi"}),
    frozenset({"ʌu̯", "ʌʊ", "əu", "aʊ", "ʌu"}),
    frozenset({"r", "ɾ"}),
    frozenset({"w", "ʋ", "v"}),
    frozenset({"h", "ɦ"}),
    frozenset({"ɡ", "g"}),
    frozenset({"ɡʰ", "gʰ", "ɡʱ"}),
    frozenset({"bʰ", "bʱ"}),
    frozenset({"dʰ", "dʱ", "d̪ʰ"}),
    frozenset({"t", "t̪"}),
    frozenset({"tʰ", "t̪ʰ"}),
    frozenset({"d", "d̪"}),
    frozenset({"ɟʰ", "ɟʱ", "dʒʱ"}),
    frozenset({"c", "tʃ", "ts"}),
    frozenset({"cʰ", "tʃʰ", "tsʰ"}),
    frozenset({"ɟ", "dʒ", "dz"}),
    frozenset({"ɖʰ", "ɖʱ"}),
)

#: ASCII mnemonics of espeak-ng's ``ne`` phoneme table for each Nepali phone: the teacher voice speaks
#: the frontend's phones through ``[[...]]`` phoneme input.
ESPEAK_MNEMONIC: dict[str, str] = {
    "ʌ": "V", "aː": "a:", "i": "i", "u": "u", "e": "e", "o": "o", "ʌi̯": "VI", "ʌu̯": "VU",
    "ə": "@", "iː": "i:", "uː": "u:", "eː": "e:", "oː": "o:", "ɛː": "E:", "ɔː": "O:", "ɪ": "I", "ʊ": "U",
    "ɛ": "E", "ɔ": "O", "a": "a", "ɐ": "V", "ɦ": "H", "ʋ": "v",
    "k": "k", "kʰ": "k#", "ɡ": "g", "ɡʰ": "g#", "ŋ": "N",
    "c": "c", "cʰ": "c#", "ɟ": "J", "ɟʰ": "J#", "ɲ": "n^",
    "ʈ": "t.", "ʈʰ": "t.#", "ɖ": "d.", "ɖʰ": "d.#", "ɳ": "n.",
    "t": "t", "tʰ": "t#", "d": "d", "dʰ": "d#", "n": "n",
    "p": "p", "pʰ": "p#", "b": "b", "bʰ": "b#", "m": "m",
    "j": "j", "r": "r", "ɾ": "r", "l": "l", "w": "w", "s": "s", "ʃ": "S", "ʂ": "s.", "h": "h",
    "ɽ": "r.", "ɽʰ": "r.#", "f": "f", "z": "z",
}

LONG = "ː"  # IPA length mark
_STRESS = str.maketrans("", "", "ˈˌ'")


def strip_nasal(phone: str) -> str:
    """The phone without nasalisation (precomposed ``ẽ`` as well as ``e`` + U+0303)."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", phone).replace(NASAL, ""))


def is_nasal(phone: str) -> bool:
    return NASAL in unicodedata.normalize("NFD", phone)


def is_vowel(phone: str) -> bool:
    return strip_nasal(phone) in VOWEL_BASES


def clean_espeak_ipa(phone: str) -> str:
    """Normalise one espeak IPA phone: NFC, no stress marks, ``g`` -> ``ɡ``, espeak's diphthongs
    ``ʌɪ``/``ʌʊ`` -> ``ʌi̯``/``ʌu̯``."""
    phone = unicodedata.normalize("NFC", phone).translate(_STRESS).strip()
    phone = phone.replace("g", "ɡ")
    return {"ʌɪ": "ʌi̯", "ʌʊ": "ʌu̯"}.get(phone, phone)


def unprolonged(phone: str) -> str:
    """The inventory vowel an espeak long vowel outside the inventory lengthens: ``ʌː`` (avagraha ``ऽ``) ->
    ``ʌ``, ``oːː`` -> ``oː``, ``əə`` -> ``ə``, espeak ``ne``'s ``ɪː`` -> ``ɪ``; any other phone unchanged (read as
    a consonant, they made vowels vanish from the alignment). For espeak's pronunciation of a word only (a
    recognizer's vocabulary keeps its own long vowels, e.g. ``ɜː``)."""
    if is_vowel(phone):
        return phone
    half = len(phone) // 2
    if len(phone) % 2 == 0 and half and phone[:half] == phone[half:] and is_vowel(phone[:half]):
        return phone[:half]  # əə
    shorter = phone
    while shorter.endswith(LONG) and len(shorter) > 1:
        shorter = shorter[:-1]
        if is_vowel(shorter):
            return shorter  # ʌː, oːː
    return phone


def equivalents(phone: str) -> frozenset[str]:
    """Every symbol that counts as ``phone`` (itself included; nasalisation ignored)."""
    base = strip_nasal(phone)
    for cls in EQUIVALENCE_CLASSES:
        if base in cls:
            return cls | {phone}
    return frozenset({phone, base})


def espeak_phoneme_input(phones: list[str]) -> str:
    """Phones -> espeak ``[[...]]`` input for one word (nasal vowels get espeak's ``~``)."""
    out = []
    for phone in phones:
        base = strip_nasal(phone)
        if base not in ESPEAK_MNEMONIC:
            raise KeyError(f"no espeak mnemonic for phone {phone!r}")
        # espeak nasalises only one-letter vowel mnemonics ("a:~" would end the word): long vowels
        # use the short mnemonic, diphthongs lose the nasalisation
        out.append(_NASAL_MNEMONIC.get(base, ESPEAK_MNEMONIC[base]) if is_nasal(phone) else ESPEAK_MNEMONIC[base])
    return "".join(out)


_NASAL_MNEMONIC = {
    "ʌ": "V~", "ə": "V~", "aː": "a~", "a": "a~", "i": "i~", "iː": "i~", "u": "u~", "uː": "u~", "e": "e~", "eː": "e~",
    "o": "o~", "oː": "o~", "ɛː": "E~", "ɛ": "E~", "ɔː": "O~", "ɔ": "O~", "ɪ": "I~", "ʊ": "U~",
}


def canonical(phone: str) -> str:
    """The representative of ``phone``'s equivalence class (nasalisation dropped): the label our own
    recognizers are trained on, so that ``ə``/``ʌ`` (written both ways by espeak) are one token."""
    base = strip_nasal(clean_espeak_ipa(phone))
    for cls in EQUIVALENCE_CLASSES:
        if base in cls:
            return _REPRESENTATIVE[cls]
    return base


_REPRESENTATIVE: dict[frozenset[str], str] = {
    cls: next(p for p in (
        "ʌ", "aː", "i", "u", "e", "o", "ɛː", "ɔː", "ʌi̯", "ʌu̯", "r", "w", "h", "ɡ", "ɡʰ", "bʰ", "dʰ", "t", "tʰ",
        "d", "ɟʰ", "c", "cʰ", "ɟ", "ɖʰ",
    ) if p in cls)
    for cls in EQUIVALENCE_CLASSES
}


def coarse(phone: str) -> str:
    """The coarse class used to compare recognizers across voices and real speech: :func:`canonical`, then
    length, nasalisation and stress marks dropped, the flap counted as the trill, every schwa symbol one
    (``aː``->``a``, ``ɾ``->``r``, ``ə``->``ʌ``, ``ɜː``->``ʌ``). Idempotent: ``coarse(coarse(p)) == coarse(p)``."""
    out = phone
    for _ in range(8):  # dropping a mark can land in another class (ɜː -> ɜ -> ʌ, aːɪ -> aɪ -> ʌi̯): to a fixed point
        base = canonical(out).replace("ː", "").replace("\u0303", "").replace("ˈ", "").replace("ˌ", "")
        base = {"ɾ": "r", "ə": "ʌ", "ɐ": "ʌ"}.get(base, base)
        if base == out:
            break
        out = base
    return out
