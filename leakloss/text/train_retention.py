"""Train the inherent-vowel retention model (:mod:`leakloss.text.retention`) on the Google Nepali lexicon.

    python -m leakloss.text.train_retention [--lexicon PATH] [--out leakloss/assets/frontend]

Data: every entry of the shared dev lexicon (``../shared/data/nepali-lexicon/lexicon-dev.tsv``) whose
phones align to its spelling (:func:`leakloss.text.g2p.inherent_vowel_pattern`); one row per written
inherent vowel, label = the lexicon pronounces it. The lexicon itself never enters the repository; the
trees and a card with the CC BY 4.0 attribution do.

Split, fixed by a hash of the normalised spelling (:func:`split_of`): the last hex digit of
``sha1(word.encode("utf-8"))`` -- ``0 1 2`` held-out test (~19%, the words the hand-written rules were
never studied on either), ``3 4`` the part the hand-written rules were written on besides the rest
(``calibration``: it chose the thresholds alone until 2026-12-02), the rest ``train``. The trees fit
``train`` and ``calibration`` together (the *fit words*).

Confidence thresholds are chosen out of fold (:func:`out_of_fold_logits`): the fit words are cut in
:data:`CALIBRATION_FOLDS` folds (:func:`calibration_fold`), each predicted by trees fitted on the other
folds (and networks, when the model has them); those predictions of every fit word choose ``high`` and
``medium``. Each fold's trees see 90% of
the final trees' data, so their confidence is a slightly pessimistic estimate of the final trees'; and
27.5k out-of-fold words instead of 4.2k calibration words let the ``high`` target sit one standard error above
the goal (:data:`HIGH_TARGET`), not the wide margin 4.2k words would need.

The context memory (:class:`leakloss.text.retention.ContextMemory`) is counted on the training words; the
training rows' own memory features are counted out of fold (:func:`memory_fold`), so that no row sees its
own label through the memory; held-out rows read the full memory, as a user's words do. The word vocabulary
(:class:`leakloss.text.retention.WordVocabulary`) holds every fit word's spelling (also those with no
inherent vowel or unaligned phones: गर्नु makes गर a verb root); a training row reads it without its own
word (leave-one-out), as a held-out word, never in it, does.

The sequence networks (:mod:`leakloss.text.retention_net`, :data:`NET_MEMBERS` seeds averaged) are trained on
the same fit words; their weight in the log-odds mix is chosen among :data:`NET_WEIGHTS` on the out-of-fold
predictions (each fold's trees and networks fitted on the other folds), by `high` coverage.

Then the word's decisions are rescored together (:mod:`leakloss.text.phonotactics`): each candidate pattern's
phones and marked letters are scored by n-gram models of the fit words' patterns; their weights and the keep
bonus are chosen among :data:`PHONOTACTIC_WEIGHTS` x :data:`KEEP_BONUSES` for the most out-of-fold agreement,
each fold's words scored by n-gram models counted without them (``--phone-order 0 --letter-order 0``: no
rescoring).

The morphology features (:mod:`leakloss.text.morphology`) come from a hunspell dictionary, by default Debian's
``hunspell-ne`` (``--hunspell PATH`` for another, ``none`` for none); the model stores its forms as hashes, so
inference never needs the dictionary installed.

A run takes ~45 minutes on 2 cores, most of it the :data:`CALIBRATION_FOLDS` out-of-fold fits; each fold's
logits are saved under ``--checkpoints`` (default ``~/.cache/leakloss/train_retention/<run key>``, the key a
hash of the lexicon, the dictionary, the code and the settings: :func:`run_key`), and an interrupted run started again
with the same inputs takes the finished folds from there.

Training needs scikit-learn (``HistGradientBoostingClassifier``) and torch; inference uses neither: the
trees are exported to JSON (checked to reproduce scikit-learn's probabilities) and the networks run in numpy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence

import numpy as np

from leakloss.atomic import write_files_atomic, write_text_atomic
from leakloss.paths import shared_path
from leakloss.text.morphology import HUNSPELL_NE, Morphology, MorphologyError
from leakloss.text.retention import (
    CATEGORICAL, CONTEXT_NAMES, FEATURE_NAMES, FEATURE_SCHEMA, FORMAT, MEMORY_MIN_COUNT, ContextMemory,
    RetentionModel, SlotPlan, WordVocabulary, forced_slots, mixed_probability, plan_phones, plan_word,
    slot_features,
)
from leakloss.text.phonotactics import (
    KINDS, ORDERS, Candidates, NgramModel, Phonotactics, candidates, pattern_scores, pattern_tokens, rescore,
)

if TYPE_CHECKING:
    from leakloss.text.retention_net import RetentionNet

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LEXICON = Path(shared_path("data/nepali-lexicon/lexicon-dev.tsv"))
DEFAULT_OUT = REPO / "leakloss" / "assets" / "frontend"
TEST_DIGITS, CAL_DIGITS = frozenset("012"), frozenset("34")
HIGH_TARGET = 0.9955  # word agreement of `high` words, out of fold: the goal on held-out words (0.995) plus one
# standard error of the out-of-fold estimate (~0.0005 over ~21k high words); at the goal itself two models in a row
# agreed 0.9950 / 0.9953 held out, a coin toss on the goal
MEDIUM_TARGET = 0.99  # deletion precision of testable (high + medium) words, out of fold: kept at the
# goal (0.98 held out) plus a margin, since the held-out figure rests on only ~700 sites
MEMORY_FOLDS = 5  # out-of-fold context-memory features for the training rows
NET_EPOCHS = 12  # the sequence network's passes over the fit words (~1 min on 2 cores)
#: Networks averaged: one network's ranking of words by confidence varies with its seed (held-out `high`
#: coverage 0.753-0.785 over three seeds at one mix weight); the mean of three varies less.
NET_MEMBERS = 3
#: Mix weights of the network tried on the out-of-fold predictions; the one with the most `high` coverage wins.
NET_WEIGHTS: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
NET_FILE = "retention_net.safetensors"
#: Weights of each n-gram's log-probability (per kind of :data:`leakloss.text.phonotactics.KINDS`) and bonuses per
#: kept vowel tried on the out-of-fold predictions (every combination).
PHONOTACTIC_WEIGHTS: dict[str, tuple[float, ...]] = {"phones": (0.0, 0.1, 0.2, 0.3), "letters": (0.0, 0.3, 0.5, 0.7)}
KEEP_BONUSES: tuple[float, ...] = (-1.5, -1.25, -1.0, -0.75, -0.5, -0.25, 0.0)
#: Where the training script keeps each out-of-fold fold's logits, so that an interrupted run resumes.
DEFAULT_CHECKPOINTS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leakloss" / "train_retention"
CALIBRATION_FOLDS = 10  # out-of-fold predictions that choose the confidence thresholds (fold models see 90% of
# the fit words: with 5 folds, 80%, their thresholds came out stricter than the final model needs)

#: Inflected / compound word groups measured apart (the suffix splits and verb endings the issue names).
VERB_ENDINGS: tuple[str, ...] = ("एर", "ेर", "नु", "छ", "छन्", "न्छ", "यो", "ियो", "ने", "एको", "ेको", "दै", "दा", "थ्यो")
NAMED_SUFFIXES: tuple[str, ...] = ("को", "मा", "लाई", "हरू")


def split_of(word: str) -> str:
    """``test`` / ``calibration`` / ``train`` by the last hex digit of sha1(normalised spelling)."""
    d = hashlib.sha1(word.encode("utf-8")).hexdigest()[-1]
    return "test" if d in TEST_DIGITS else "calibration" if d in CAL_DIGITS else "train"


def word_groups(word: str) -> list[str]:
    """The inflection/compound groups a normalised word belongs to (``plain`` when none)."""
    from leakloss.text.g2p import compound_boundaries, parse_word

    plan = plan_word(word)
    groups = []
    if plan.suffixes:
        groups.append("suffix")
        groups += [f"-{s}" for s in NAMED_SUFFIXES if s in plan.suffixes]
    if word.endswith(VERB_ENDINGS):
        groups.append("verb-ending")
        groups += [f"-{e}" for e in ("एर", "नु", "छ") if word.endswith(e) or (e == "एर" and word.endswith("ेर"))]
    if compound_boundaries(parse_word(plan.stem)):
        groups.append("compound")
    return groups or ["plain"]


def load_rows(lexicon: Path) -> list[tuple[str, tuple[bool, ...] | None]]:
    """Unique (word, lexicon inherent-vowel pattern or None) in file order, entries with phones only."""
    from leakloss.text.g2p import inherent_vowel_pattern, iter_lexicon

    rows, seen = [], set()
    for _, word, phones in iter_lexicon(lexicon, strict=False):
        if phones is None or word in seen:
            continue
        seen.add(word)
        rows.append((word, inherent_vowel_pattern(word, phones)))
    return rows


def labelled_plans(rows: Iterable[tuple[str, tuple[bool, ...] | None]]) -> list[tuple[str, SlotPlan, tuple[bool, ...]]]:
    """(word, plan, lexicon decision per slot) for the words whose lexicon phones align to their slots."""
    out = []
    for word, ref in rows:
        if ref is None:
            continue  # lexicon phones that do not align to the spelling: no labels
        plan = plan_word(word)
        if len(ref) != len(plan.slots) or not plan.slots:
            continue
        out.append((word, plan, ref))
    return out


def memory_fold(word: str) -> int:
    """Which of the :data:`MEMORY_FOLDS` folds a training word's memory features are counted without
    (its second-last sha1 hex digit; the last one chose its split)."""
    return int(hashlib.sha1(word.encode("utf-8")).hexdigest()[-2], 16) % MEMORY_FOLDS


def calibration_fold(word: str) -> int:
    """Which of the :data:`CALIBRATION_FOLDS` folds predicts a fit word out of fold (sha1 hex digits -7..-6;
    the last one chose its split, the second-last its memory fold, -5..-4 the learning curve's subsets)."""
    return int(hashlib.sha1(word.encode("utf-8")).hexdigest()[-7:-5], 16) % CALIBRATION_FOLDS


def build_matrix(labelled: Sequence[tuple[str, SlotPlan, tuple[bool, ...]]],
                 tables: tuple[ContextMemory, WordVocabulary, Morphology] | None = None,
                 min_count: int = MEMORY_MIN_COUNT, vocabulary: WordVocabulary | None = None,
                 morphology: Morphology | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Feature rows ``[vowels, len(FEATURE_NAMES)]``, labels ``[vowels]`` and each row's word.

    With ``tables`` (a fitted model's memory, vocabulary and morphology): every row's features come from them
    (held-out words). Without: the rows are the training rows; each word's memory features are counted from the other
    folds' words only (out-of-fold target encoding), so that the trees learn how far to trust a memory that
    has not seen the word, and its vocabulary features from ``vocabulary`` (the training words', by default
    those of ``labelled``) without the word itself (leave-one-out: a held-out word is never in it either); its
    morphology features from ``morphology`` (default: none, every form unknown)."""
    if not labelled:
        return np.zeros((0, len(FEATURE_NAMES))), np.zeros(0, dtype=np.int64), []
    fold_memories = None
    if tables is None:
        if vocabulary is None:
            vocabulary = WordVocabulary.count(w for w, _, _ in labelled)
        if morphology is None:
            morphology = Morphology({})
        folds = [memory_fold(w) for w, _, _ in labelled]
        fold_memories = [ContextMemory.count(((p, r) for (_, p, r), f in zip(labelled, folds) if f != k), min_count)
                         for k in range(MEMORY_FOLDS)]
    else:
        memory, vocabulary, morphology = tables
    xs, ys, words = [], [], []
    for i, (word, plan, ref) in enumerate(labelled):
        mem = memory if fold_memories is None else fold_memories[folds[i]]
        xs.append(slot_features(plan, mem, vocabulary, morphology, exclude_self=fold_memories is not None))
        ys.append(np.asarray(ref, dtype=np.int64))
        words += [word] * len(ref)
    return np.concatenate(xs), np.concatenate(ys), words


class Fit(NamedTuple):
    """A fitted retention model with what the card and the JSON export need."""

    clf: object  #: the fitted scikit-learn HistGradientBoostingClassifier
    memory: ContextMemory  #: the context memory counted on all the training words
    vocabulary: WordVocabulary  #: the training words' vocabulary
    morphology: Morphology  #: the dictionary's word forms (empty when trained without one)
    n_cat_values: int  #: categorical ids are < this
    model: RetentionModel  #: the exported trees, thresholds not calibrated yet (high 1.0, medium 0.0)
    rows: int  #: training rows (written inherent vowels)
    keep_rate: float  #: share of the training vowels the lexicon keeps


def fit_trees(train: Sequence[tuple[str, SlotPlan, tuple[bool, ...]]], *, max_iter: int = 600,
              learning_rate: float = 0.05, max_leaf_nodes: int = 31, l2: float = 1.0, min_samples_leaf: int = 20,
              max_features: float = 1.0, memory_min_count: int = MEMORY_MIN_COUNT,
              vocabulary_words: Sequence[str] | None = None, morphology: Morphology | None = None) -> Fit:
    """Fit the gradient-boosted trees on ``train`` (from :func:`labelled_plans`) and export them to the
    JSON model; the training script and ``benchmarks/frontend_learning_curve.py`` both fit through here.
    ``vocabulary_words``: the training words of the vocabulary (all of them, also those :func:`labelled_plans`
    leaves out: a word with no inherent vowel still tells that a root takes verb endings); default the
    words of ``train``. ``morphology``: the word forms of a hunspell dictionary (:mod:`leakloss.text.morphology`);
    default none (its features all say unknown)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    memory = ContextMemory.count(((p, r) for _, p, r in train), memory_min_count)
    vocabulary = WordVocabulary.count(vocabulary_words if vocabulary_words is not None else (w for w, _, _ in train))
    morphology = morphology if morphology is not None else Morphology({})
    x, y, _ = build_matrix(train, min_count=memory_min_count, vocabulary=vocabulary, morphology=morphology)
    n_cat_values = int(max(x[:, [i for i, c in enumerate(CATEGORICAL) if c]].max() + 1, 2))
    clf = HistGradientBoostingClassifier(
        max_iter=max_iter, learning_rate=learning_rate, max_leaf_nodes=max_leaf_nodes,
        categorical_features=np.asarray(CATEGORICAL), l2_regularization=l2, early_stopping=False, random_state=0,
        min_samples_leaf=min_samples_leaf, max_features=max_features,
    )
    clf.fit(x, y)
    model = RetentionModel(export_trees(clf, n_cat_values, {"high": 1.0, "medium": 0.0}, {}, memory, vocabulary,
                                        morphology))
    return Fit(clf, memory, vocabulary, morphology, n_cat_values, model, int(len(x)), float(y.mean()))


def export_trees(clf, n_cat_values: int, thresholds: dict[str, float], card: dict, memory: ContextMemory,
                 vocabulary: WordVocabulary, morphology: Morphology, net: dict | None = None,
                 phonotactics: dict | None = None) -> dict:
    """A fitted binary ``HistGradientBoostingClassifier`` -> the JSON spec :class:`RetentionModel` reads
    (``net``: :func:`net_spec`; ``phonotactics``: the n-gram model's JSON, its weight and the keep bonus)."""

    # scikit-learn re-encodes categorical columns with an OrdinalEncoder (categories sorted, unknown ones
    # missing) and puts them first: map its columns and category codes back to ours.
    is_cat = np.asarray(CATEGORICAL)
    column = np.concatenate([np.where(is_cat)[0], np.where(~is_cat)[0]])
    categories = clf._preprocessor.named_transformers_["encoder"].categories_

    def in_bits(bits: np.ndarray, v: int) -> bool:
        return bool((int(bits[v // 32]) >> (v % 32)) & 1)

    trees, cat_left = [], []
    max_depth = 0
    for (pred,) in clf._predictors:
        nodes = pred.nodes
        t = {"feature": [], "threshold": [], "left": [], "right": [], "value": [], "cat": []}
        for nd in nodes:
            leaf = bool(nd["is_leaf"])
            max_depth = max(max_depth, int(nd["depth"]))
            t["feature"].append(0 if leaf else int(column[nd["feature_idx"]]))
            t["threshold"].append(0.0 if leaf or nd["is_categorical"] else float(nd["num_threshold"]))
            t["left"].append(-1 if leaf else int(nd["left"]))
            t["right"].append(-1 if leaf else int(nd["right"]))
            t["value"].append(float(nd["value"]) if leaf else 0.0)
            if not leaf and nd["is_categorical"]:
                bits = pred.raw_left_cat_bitsets[nd["bitset_idx"]]
                cats = [int(c) for c in categories[int(nd["feature_idx"])]]  # encoded code -> our id
                miss_left = bool(nd["missing_go_to_left"])
                # unknown categories follow the missing-value direction, as scikit-learn does
                left = sorted({cats[e] for e in range(len(cats)) if in_bits(bits, e)}
                              | ({v for v in range(n_cat_values) if v not in set(cats)} if miss_left else set()))
                t["cat"].append(len(cat_left))
                cat_left.append(left)
            else:
                t["cat"].append(-1)
        trees.append(t)
    return {
        "format": FORMAT, "feature_schema": FEATURE_SCHEMA, "feature_names": list(FEATURE_NAMES),
        "categorical": list(CATEGORICAL), "baseline": float(clf._baseline_prediction.ravel()[0]),
        "max_depth": max_depth, "n_cat_values": n_cat_values, "cat_left": cat_left, "trees": trees,
        "thresholds": thresholds, "memory": memory.to_json(), "vocabulary": vocabulary.to_json(),
        "morphology": morphology.to_json(), "card": card,
        **({"net": net} if net is not None else {}),
        **({"phonotactics": phonotactics} if phonotactics is not None else {}),
    }


def pick_threshold(probs: Sequence[float], correct: Sequence[bool], target: float) -> tuple[float, float, float]:
    """Lowest word-probability threshold whose words ({p >= t}) are right at least ``target`` of the time.
    Returns (threshold, agreement above it, coverage)."""
    order = np.argsort(-np.asarray(probs), kind="stable")
    p = np.asarray(probs)[order]
    ok = np.cumsum(np.asarray(correct, dtype=np.float64)[order])
    n = np.arange(1, len(p) + 1)
    acc = ok / n
    good = [i for i in range(len(p)) if acc[i] >= target and (i + 1 == len(p) or p[i + 1] < p[i])]
    if not good:
        return 1.0 + 1e-9, float("nan"), 0.0
    i = max(good)
    return float(p[i]), float(acc[i]), float((i + 1) / len(p))


def fit_net(train: Sequence[tuple[str, SlotPlan, tuple[bool, ...]]], *, morphology: Morphology,
            epochs: int = NET_EPOCHS, seed: int = 0, embed: int = 32, hidden: int = 128, layers: int = 2,
            dropout: float = 0.2, batch_size: int = 256, max_lr: float = 3e-3) -> "RetentionNet":
    """Train the sequence network (:class:`leakloss.text.retention_net.RetentionNet`) on ``train`` (from
    :func:`labelled_plans`), reading ``morphology``'s word forms (the trees' table): binary
    cross-entropy on the inherent-vowel units, AdamW with a one-cycle learning rate, ``epochs`` passes in a
    seeded order. Returns it in eval mode."""
    import torch

    from leakloss.text.retention_net import RetentionNet, batch_ids, field_sizes

    torch.manual_seed(seed)
    net = RetentionNet(field_sizes(), embed, hidden, layers, dropout)
    ids, lengths, mask = batch_ids([p for _, p, _ in train], morphology)
    labels = torch.zeros(mask.shape)
    for i, (_, plan, ref) in enumerate(train):
        labels[i, list(plan.slots)] = torch.tensor(ref, dtype=torch.float32)
    opt = torch.optim.AdamW(net.parameters(), lr=max_lr, weight_decay=1e-4)
    steps = epochs * ((len(train) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=max_lr, total_steps=max(steps, 1))
    order = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(train), generator=order)
        for b in range(0, len(train), batch_size):
            idx = perm[b: b + batch_size]
            t = int(lengths[idx].max())
            logits = net(ids[idx, :t], lengths[idx])
            m = mask[idx, :t]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits[m].float(), labels[idx, :t][m])
            if not torch.isfinite(loss):
                raise RuntimeError(f"the retention network's loss is {loss.item()} (not finite): stopped")
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return net.eval()


def fit_nets(train: Sequence[tuple[str, SlotPlan, tuple[bool, ...]]], *, members: int = NET_MEMBERS, seed: int = 0,
             **kwargs) -> list["RetentionNet"]:
    """``members`` networks (:func:`fit_net` with seeds ``seed``, ``seed + 1``, ...), whose log-odds the model averages."""
    return [fit_net(train, seed=seed + i, **kwargs) for i in range(members)]


def net_spec(nets: Sequence["RetentionNet"], weight: float, file: str, sha256: str) -> dict:
    """The ``net`` entry of a model spec: where the weights are, their sha256, the members' shared architecture
    and the mix weight."""
    net = nets[0]
    return {"file": file, "sha256": sha256, "weight": float(weight), "members": len(nets), "sizes": list(net.sizes),
            "embed": net.embed, "hidden": net.lstm.hidden_size, "layers": net.lstm.num_layers}


def net_weights_bytes(nets: Sequence["RetentionNet"]) -> bytes:
    """The members' weights as safetensors bytes (contiguous float32 tensors, ``member{i}.`` before each name)."""
    from safetensors.torch import save

    return save({f"member{i}.{k}": v.detach().float().contiguous()
                 for i, net in enumerate(nets) for k, v in net.state_dict().items()})


def model_with_net(fit: Fit, nets: Sequence["RetentionNet"], weight: float, thresholds: dict[str, float] | None = None,
                   card: dict | None = None, phonotactics: dict | None = None) -> tuple[dict, bytes, RetentionModel]:
    """The spec, the networks' safetensors bytes and the loaded :class:`RetentionModel` of trees + networks
    (+ the phonotactic rescoring, if given)."""
    weights = net_weights_bytes(nets)
    spec = export_trees(fit.clf, fit.n_cat_values, thresholds or {"high": 1.0, "medium": 0.0}, card or {},
                        fit.memory, fit.vocabulary, fit.morphology,
                        net_spec(nets, weight, NET_FILE, hashlib.sha256(weights).hexdigest()), phonotactics)
    from safetensors.numpy import load

    return spec, weights, RetentionModel(spec, "<fitted>", load(weights))


def word_logits(model: RetentionModel, plans: Sequence[SlotPlan]) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Per plan, the trees' and the network's log-odds (:meth:`RetentionModel.plan_logits`)."""
    return [model.plan_logits(p) for p in plans]


def out_of_fold_logits(rows: Sequence[tuple[str, tuple[bool, ...] | None]], net_kwargs: dict | None = None,
                       checkpoints: Path | None = None, **fit_kwargs) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """:func:`word_logits` of every word of ``rows`` by trees (:func:`fit_trees` with ``fit_kwargs``) and, with
    ``net_kwargs``, networks (:func:`fit_nets`) fitted on the other :func:`calibration_fold` folds; in the order
    of ``rows``. ``checkpoints``: a folder where each finished fold's logits are saved (:func:`save_fold`) and
    from which a rerun takes them instead of refitting (the folder must belong to these rows and settings:
    :func:`run_key` names one)."""
    folds = [calibration_fold(w) for w, _ in rows]
    out: list = [None] * len(rows)
    for k in range(CALIBRATION_FOLDS):
        held = [i for i, f in enumerate(folds) if f == k]
        if not held:
            continue
        words = [rows[i][0] for i in held]
        pairs = load_fold(checkpoints / f"fold{k}.npz", words) if checkpoints is not None else None
        if pairs is None:
            others = [r for r, f in zip(rows, folds) if f != k]
            train = labelled_plans(others)
            fit = fit_trees(train, vocabulary_words=[w for w, _ in others], **fit_kwargs)
            model = fit.model if net_kwargs is None else model_with_net(
                fit, fit_nets(train, morphology=fit.morphology, **net_kwargs), 0.0)[2]
            pairs = word_logits(model, [plan_word(w) for w in words])
            if checkpoints is not None:
                save_fold(checkpoints / f"fold{k}.npz", words, pairs)
        for i, pair in zip(held, pairs):
            out[i] = pair
    return out


def run_key(*parts: object) -> str:
    """A name for a training run's checkpoints: sha256 of what decides its folds' logits (the lexicon's and the
    dictionary's bytes, the frontend's and the model's source files, the settings, the feature schema), so that a
    rerun with anything changed starts afresh."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def save_fold(path: Path, words: Sequence[str], pairs: Sequence[tuple[np.ndarray, np.ndarray | None]]) -> None:
    """One fold's logits as an ``.npz`` (no pickle), written whole or not at all."""
    import io

    has_net = bool(pairs) and pairs[0][1] is not None
    buf = io.BytesIO()
    np.savez(buf, words=np.asarray(words, dtype=str), lengths=np.asarray([len(t) for t, _ in pairs], dtype=np.int64),
             trees=np.concatenate([t for t, _ in pairs] or [np.zeros(0)]),
             net=np.concatenate([n for _, n in pairs] or [np.zeros(0)]) if has_net else np.zeros(0),
             has_net=np.asarray(has_net))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_files_atomic({path: buf.getvalue()})


def load_fold(path: Path, words: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray | None]] | None:
    """A fold saved by :func:`save_fold`, or None when there is none, or it is unreadable, or it holds other words."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if z["words"].tolist() != list(words):
                return None
            ends = np.cumsum(z["lengths"])
            trees = np.split(z["trees"], ends[:-1]) if len(ends) else []
            nets = np.split(z["net"], ends[:-1]) if bool(z["has_net"]) and len(ends) else None
    except (OSError, ValueError, KeyError, EOFError):
        return None
    return [(t, None if nets is None else n) for t, n in zip(trees, nets or [None] * len(trees))]


def predictions_at(plans: Sequence[SlotPlan], logits: Sequence[tuple[np.ndarray, np.ndarray | None]],
                   weight: float, ngrams: Sequence[dict[str, NgramModel]] | None = None,
                   ngram_weights: Sequence[float] = (), keep_bonus: float = 0.0
                   ) -> list[tuple[tuple[str, ...], float, list[bool]]]:
    """(phones, word probability, kept per slot) of each plan from its log-odds mixed at ``weight``, decided as
    :meth:`RetentionModel.decide` decides (forced slots kept; rescored by the models ``ngrams[i]`` for plan i at
    ``ngram_weights``, if given)."""
    return decisions(plans, candidate_tables(plans, logits, weight, ngrams), ngram_weights, keep_bonus)


def candidate_tables(plans: Sequence[SlotPlan], logits: Sequence[tuple[np.ndarray, np.ndarray | None]],
                     weight: float, ngrams: Sequence[dict[str, NgramModel]] | None = None) -> list[Candidates]:
    """Each plan's candidate patterns (:func:`leakloss.text.phonotactics.candidates`) from its log-odds mixed at
    ``weight``, scored by the models ``ngrams[i]`` (none: no n-gram scores)."""
    return [candidates(plan, mixed_probability(trees, net, weight), None if ngrams is None else ngrams[i],
                       forced_slots(plan)) for i, (plan, (trees, net)) in enumerate(zip(plans, logits))]


def decisions(plans: Sequence[SlotPlan], tables: Sequence[Candidates], ngram_weights: Sequence[float],
              keep_bonus: float) -> list[tuple[tuple[str, ...], float, list[bool]]]:
    """(phones, word probability, kept per slot) of each plan, its candidates rescored at these settings."""
    out = []
    for plan, table in zip(plans, tables):
        d = rescore(table, ngram_weights if table.ngram_logp.shape[1] else [], keep_bonus)
        out.append((plan_phones(plan, d.kept), d.probability, list(d.kept)))
    return out


def predict_words(model: RetentionModel, words: Sequence[str]) -> list[tuple[tuple[str, ...], float, list[bool]]]:
    """(phones, word probability, kept per slot) of each word by ``model`` (:meth:`RetentionModel.decide`)."""
    out = []
    for w in words:
        plan = plan_word(w)
        d = model.decide(plan)
        out.append((plan_phones(plan, d.kept), d.probability, list(d.kept)))
    return out


def fold_ngrams(rows: Sequence[tuple[str, tuple[bool, ...] | None]], orders: dict[str, int]
                ) -> list[dict[str, NgramModel]]:
    """Per word of ``rows``, the n-gram models (kind -> order: ``orders``) of the other :func:`calibration_fold`
    folds' patterns (the lexicon's pattern as :func:`leakloss.text.phonotactics.pattern_tokens` writes it), so
    that no word is scored by a model that has seen it."""
    folds = [calibration_fold(w) for w, _ in rows]
    labelled = labelled_plans(rows)
    models = {f: count_ngrams([(p, r) for w, p, r in labelled if calibration_fold(w) != f], orders)
              for f in sorted(set(folds))}
    return [models[f] for f in folds]


def count_ngrams(patterns: Sequence[tuple[SlotPlan, Sequence[bool]]], orders: dict[str, int]) -> dict[str, NgramModel]:
    """An n-gram model per kind of ``orders`` (kind -> order) counted on the (plan, kept) ``patterns``."""
    return {kind: NgramModel.count((pattern_tokens(p, r, kind) for p, r in patterns), order)
            for kind, order in orders.items()}


def choose_rescoring(rows: Sequence[tuple[str, tuple[bool, ...] | None]], plans: Sequence[SlotPlan],
                     tables: Sequence[Candidates], kinds: Sequence[str]
                     ) -> tuple[tuple[tuple[float, ...], float], float, float]:
    """The n-gram weights (one per kind of ``kinds``, from :data:`PHONOTACTIC_WEIGHTS`) and keep bonus (from
    :data:`KEEP_BONUSES`) with the most words of ``rows`` agreeing (on a tie: the lighter weights, then the bonus
    nearer 0); returns ((weights, bonus), its agreement, the agreement without rescoring)."""
    from itertools import product

    from leakloss.text.g2p import inherent_vowel_pattern

    right = np.concatenate([[ref is not None and inherent_vowel_pattern(w, plan_phones(plan, k)) == ref
                             for k in table.kept] for (w, ref), plan, table in zip(rows, plans, tables)]).astype(bool)
    sizes = [len(t.kept) for t in tables]
    word = np.repeat(np.arange(len(tables)), sizes)
    flat = Candidates(np.zeros((len(word), 0), dtype=bool), np.concatenate([t.slot_logp for t in tables]),
                      np.concatenate([t.ngram_logp for t in tables]).reshape(len(word), len(kinds)),
                      np.concatenate([t.n_kept for t in tables]), np.zeros(0))
    position = np.arange(len(word))

    def agreement(ws: tuple[float, ...], b: float) -> float:
        # each word's first candidate of highest score, as rescore's argmax takes it, summed as rescore sums it
        order = np.lexsort((position, -pattern_scores(flat, ws, b), word))
        first = np.r_[True, word[order][1:] != word[order][:-1]]
        return float(right[order][first].sum()) / max(len(rows), 1)

    scores = {}
    for ws in product(*(PHONOTACTIC_WEIGHTS[k] for k in kinds)):
        for b in KEEP_BONUSES:
            scores[(tuple(ws), b)] = agreement(tuple(ws), b)
    best = max(scores, key=lambda wb: (scores[wb], -sum(wb[0]), -abs(wb[1])))
    return best, scores[best], scores[(tuple(0.0 for _ in kinds), 0.0)]


def agrees(rows: Sequence[tuple[str, tuple[bool, ...] | None]],
           preds: Sequence[tuple[tuple[str, ...], float, list[bool]]]) -> list[bool]:
    """Per word of ``rows`` (word, lexicon pattern): does its prediction (from :func:`predict_words`) keep
    the same inherent vowels as the lexicon? An unalignable lexicon entry (``None``) never agrees."""
    from leakloss.text.g2p import inherent_vowel_pattern

    return [ref is not None and inherent_vowel_pattern(w, phones) == ref
            for (w, ref), (phones, _, _) in zip(rows, preds)]


def deletion_truth(word: str, phones: Sequence[str], hindi: Sequence[str], ref: tuple[bool, ...] | None) -> list[bool]:
    """For every deletion site between our ``phones`` and espeak-hi's ``hindi``: is it a real contrast,
    i.e. does the lexicon (``ref``) pronounce the inherent vowel that our ʌ stands for? The slot is the
    one whose pattern flips when that ʌ is removed from our phones."""
    from leakloss.text.g2p import inherent_vowel_pattern
    from leakloss.text.sites import find_sites

    out = []
    ours = inherent_vowel_pattern(word, phones)
    for s in find_sites(list(phones), list(hindi), min_confidence="low"):
        if s.kind != "deletion":
            continue
        without = list(phones[: s.position]) + list(phones[s.position + 1:])
        alt = inherent_vowel_pattern(word, without)
        flip = ([i for i, (a, b) in enumerate(zip(ours, alt)) if a != b]
                if ours is not None and alt is not None and len(ours) == len(alt) else [])
        out.append(ref is not None and len(flip) == 1 and bool(ref[flip[0]]))
    return out


#: Case markers whose attachment must not change how the stem's inside is said.
CASE_MARKERS: tuple[str, ...] = ("को", "का", "की", "मा", "ले", "लाई", "हरू", "बाट")


def stem_consistency(patterns: dict[str, tuple[bool, ...] | None]) -> tuple[int, int, list[str]]:
    """How often the lexicon disagrees with itself: for every word X and X+marker (:data:`CASE_MARKERS`)
    both in the lexicon and aligned, X's inherent vowels other than a word-final one (which a marker may
    legitimately change) must be said the same in both. Returns (pairs, disagreeing pairs, examples)."""
    from leakloss.text.g2p import parse_word

    pairs = bad = 0
    examples: list[str] = []
    for word, ref in patterns.items():
        if not ref:
            continue
        for marker in CASE_MARKERS:
            longer = patterns.get(word + marker)
            if longer is None:
                continue
            units = parse_word(word)
            n = len(ref) - (1 if units[-1].inherent else 0)
            if n == 0 or len(longer) < n:
                continue
            pairs += 1
            if ref[:n] != longer[:n]:
                bad += 1
                examples.append(f"{word}/{word + marker}")
    return pairs, bad, examples


def card_markdown(card: dict) -> str:
    """The card as a short markdown page (written next to the model as ``retention.md``)."""
    td, cal, test = card["training_data"], card["calibration"], card["held_out_test"]
    lines = [
        f"# {card['name']}", "",
        f"**Model.** {card['model']}.", "",
        f"**Features.** {card['features']}.", "",
        f"**Training data.** {td['source']}. Licence: {td['license']}", "",
        *([f"**Morphology data.** {card['morphology_data']['source']}. Licence: {card['morphology_data']['license']}.", ""]
          if "morphology_data" in card else []),
        f"**Labels.** {td['labels']}.", "",
        f"**Split.** {td['split']}: {td['words']} words; {td['train_rows']} training rows (inherent vowels).", "",
        f"**Calibration** ({cal['method']}). Word probability = {cal['word_probability']}. `high`: p >= {cal['high']['threshold']:.6f} "
        f"(out-of-fold agreement {cal['high']['agreement']}, coverage {cal['high']['coverage']}; target "
        f"{cal['high']['target']}). `medium`: p >= {cal['medium']['threshold']:.6f} (testable deletions real "
        f"contrasts {cal['medium']['deletion_precision']} of {cal['medium']['deletion_sites']} out of fold; "
        f"high+medium coverage {cal['medium']['coverage_high_or_medium']}). `low` below.", "",
    ]
    if "network_weight" in cal:
        tried = ", ".join(f"{w}: {v['high_coverage']} ({v['agreement']})" for w, v in cal["network_weight"]["tried"].items())
        lines += [f"**Network weight** in the mix: {cal['network_weight']['chosen']}, the out-of-fold `high` coverage "
                  f"(and agreement) of each weight tried: {tried}.", ""]
    if "phonotactics" in card:
        ph = card["phonotactics"]
        lines += [f"**Phonotactic rescoring.** {ph['model']}. {ph['rescoring']}; weights {ph['weights']}, keep bonus "
                  f"{ph['keep_bonus']} ({ph['chosen']}): out-of-fold agreement {ph['out_of_fold_agreement']['rescored']} "
                  f"(not rescored {ph['out_of_fold_agreement']['not_rescored']}).", ""]
    lines += [
        f"**Held-out test** ({test['words']} words, never used to fit or calibrate): agreement {test['agreement']}, "
        f"`high` agreement {test['high_agreement']}, `high` coverage {test['high_coverage']}.", "",
        "| group | words | agreement |", "|---|---|---|",
    ]
    lines += [f"| {g} | {v['n']} | {v['agreement']} |" for g, v in test["groups"].items()]
    lines += ["", f"Reproduce: `{card['trained_with']['script']}` ({card['trained_with']['seconds']} s on 2 CPU cores); "
              f"the JSON trees reproduce scikit-learn's probabilities to {card['export_check_max_abs_diff']:.1e}.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lexicon", type=Path, default=DEFAULT_LEXICON)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--max-iter", type=int, default=600)
    ap.add_argument("--max-leaf-nodes", type=int, default=31)
    ap.add_argument("--learning-rate", type=float, default=0.05)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--min-samples-leaf", type=int, default=20)
    ap.add_argument("--max-features", type=float, default=1.0, help="share of features tried per split")
    ap.add_argument("--memory-min-count", type=int, default=MEMORY_MIN_COUNT,
                    help="contexts seen in fewer training vowels are not remembered")
    ap.add_argument("--net-epochs", type=int, default=NET_EPOCHS,
                    help="the sequence network's epochs; 0: trees alone, no network")
    ap.add_argument("--net-members", type=int, default=NET_MEMBERS, help="networks averaged (seeds seed, seed+1, ...)")
    ap.add_argument("--seed", type=int, default=0, help="the sequence networks' initialisation and data order")
    ap.add_argument("--checkpoints", default=str(DEFAULT_CHECKPOINTS),
                    help="folder of the out-of-fold folds' checkpoints (a rerun resumes from them); 'none': keep none")
    ap.add_argument("--phone-order", type=int, default=ORDERS["phones"],
                    help="order of the phone n-gram that rescores each word's decisions together; 0: none")
    ap.add_argument("--letter-order", type=int, default=ORDERS["letters"],
                    help="order of the n-gram of letters marked kept/dropped that rescores them too; 0: none")
    ap.add_argument("--hunspell", default=str(HUNSPELL_NE),
                    help="hunspell dictionary (PATH.dic + PATH.aff) whose word forms are features; 'none': without")
    args = ap.parse_args(argv)
    if args.net_epochs < 0 or args.net_members < 1 or not 0 <= args.seed < 2**32 - args.net_members:
        ap.error("--net-epochs must be >= 0, --net-members >= 1 and --seed in [0, 2**32 - members)")
    if not (0 <= args.phone_order <= 12 and 0 <= args.letter_order <= 12):
        ap.error("--phone-order and --letter-order must be in [0, 12] (0: that n-gram not used)")
    orders = {k: o for k, o in zip(KINDS, (args.phone_order, args.letter_order)) if o}
    from leakloss.text.hindi import espeak_phonemes

    t0 = time.time()
    try:
        morphology = Morphology({}) if args.hunspell == "none" else Morphology.from_hunspell(args.hunspell)
    except MorphologyError as e:
        print(f"error: {e} (Debian: apt install hunspell-ne; or --hunspell none)", file=sys.stderr)
        return 2
    print(f"morphology: {len(morphology)} word forms of {args.hunspell}")
    rows = load_rows(args.lexicon)
    parts = {"train": [], "calibration": [], "test": []}
    for w, ref in rows:
        parts[split_of(w)].append((w, ref))
    print({k: len(v) for k, v in parts.items()}, f"unaligned={sum(r is None for _, r in rows)}")
    fit_words = parts["train"] + parts["calibration"]
    fit_kwargs = dict(max_iter=args.max_iter, learning_rate=args.learning_rate, max_leaf_nodes=args.max_leaf_nodes,
                      l2=args.l2, min_samples_leaf=args.min_samples_leaf, max_features=args.max_features,
                      memory_min_count=args.memory_min_count, morphology=morphology)
    fit = fit_trees(labelled_plans(fit_words), vocabulary_words=[w for w, _ in fit_words], **fit_kwargs)
    clf, memory, n_cat_values, model = fit.clf, fit.memory, fit.n_cat_values, fit.model
    print(f"fit rows {fit.rows}, keep rate {fit.keep_rate:.3f}, categories < {n_cat_values}, "
          f"memory {len(memory)} contexts; fitted {clf.n_iter_} trees ({time.time() - t0:.0f}s)")
    xt, _, _ = build_matrix(labelled_plans(parts["test"]), (memory, fit.vocabulary, morphology))
    diff = float(np.abs(model.predict_proba(xt) - clf.predict_proba(xt)[:, 1]).max())
    print(f"export check: max |p_json - p_sklearn| = {diff:.2e} on {len(xt)} held-out rows")
    if diff > 1e-6:
        print("error: the JSON trees do not reproduce scikit-learn", file=sys.stderr)
        return 1

    net_kwargs = dict(epochs=args.net_epochs, seed=args.seed, members=args.net_members) if args.net_epochs else None
    checkpoints = None
    if args.checkpoints != "none":
        dictionary = b"" if args.hunspell == "none" else b"".join(
            Path(args.hunspell).with_suffix(e).read_bytes() for e in (".dic", ".aff"))
        from leakloss.text import g2p, retention, retention_net, slots, tables
        from leakloss.text import morphology as morphology_module

        code = b"".join(Path(m.__file__).read_bytes() for m in (
            g2p, slots, tables, morphology_module, retention, retention_net, sys.modules[__name__]))
        checkpoints = Path(args.checkpoints) / run_key(
            args.lexicon.read_bytes(), dictionary, code, FEATURE_SCHEMA, CALIBRATION_FOLDS, net_kwargs,
            {k: v for k, v in fit_kwargs.items() if k != "morphology"})
        print(f"fold checkpoints: {checkpoints}")
    nets = fit_nets(labelled_plans(fit_words), morphology=morphology, **net_kwargs) if net_kwargs else None
    net = nets[0] if nets else None
    if net is not None:
        print(f"fitted {len(nets)} sequence networks, {args.net_epochs} epochs ({time.time() - t0:.0f}s)")

    # Calibration, out of fold: the network's mix weight, then word probability -> high / medium thresholds
    resumed = len(list(checkpoints.glob("fold*.npz"))) if checkpoints is not None and checkpoints.is_dir() else 0
    print(f"out-of-fold: {resumed} of {CALIBRATION_FOLDS} folds resumed from checkpoints")
    oof = out_of_fold_logits(fit_words, net_kwargs, checkpoints, **fit_kwargs)
    fit_plans = [plan_word(w) for w, _ in fit_words]
    ngrams = fold_ngrams(fit_words, orders) if orders else None
    weights = {}
    for weight in (NET_WEIGHTS if net is not None else (0.0,)):
        tables = candidate_tables(fit_plans, oof, weight, ngrams)
        rescoring, plain = ((), 0.0), None
        if ngrams is not None:
            rescoring, _, plain = choose_rescoring(fit_words, fit_plans, tables, list(orders))
        preds = decisions(fit_plans, tables, *rescoring)
        correct = agrees(fit_words, preds)
        weights[weight] = (pick_threshold([p for _, p, _ in preds], correct, HIGH_TARGET), float(np.mean(correct)),
                           rescoring, plain, preds, correct)
        (t, acc, cov), agreement = weights[weight][:2]
        print(f"calibration ({CALIBRATION_FOLDS} folds, {len(fit_words)} words), network weight {weight}: agreement "
              f"{agreement:.4f}" + ("" if plain is None else f" (not rescored {plain:.4f}; n-gram weights "
                                    f"{dict(zip(orders, rescoring[0]))}, keep bonus {rescoring[1]})")
              + f"; high >= {t:.4f}: agreement {acc:.4f}, coverage {cov:.3f} ({time.time() - t0:.0f}s)")
    net_weight = max(weights, key=lambda w: (weights[w][0][2], -w))  # most `high` coverage; the lighter mix on a tie
    (t_high, acc_high, cov_high), _, rescoring, plain, preds, correct = weights[net_weight]
    probs = [p for _, p, _ in preds]
    phonotactics = None
    if ngrams is not None:
        final_ngrams = count_ngrams([(p, r) for _, p, r in labelled_plans(fit_words)], orders)
        phonotactics = Phonotactics(final_ngrams, dict(zip(orders, rescoring[0])), rescoring[1]).to_json()
    if net is not None:
        model = model_with_net(fit, nets, net_weight, phonotactics=phonotactics)[2]
    elif phonotactics is not None:
        model = RetentionModel(export_trees(clf, n_cat_values, {"high": 1.0, "medium": 0.0}, {}, memory,
                                            fit.vocabulary, morphology, phonotactics=phonotactics))
    hindi = espeak_phonemes([w for w, _ in fit_words], "hi")
    dels = [deletion_truth(w, ph, h, ref) for (w, ref), (ph, _, _), h in zip(fit_words, preds, hindi)]
    # medium: the lowest threshold at which testable deletions (words >= t) are real contrasts MEDIUM_TARGET
    order = np.argsort(-np.asarray(probs), kind="stable")
    real = tot = 0
    t_medium = t_high
    for i in order:
        real += sum(dels[i])
        tot += len(dels[i])
        if probs[i] <= t_high and tot and real / tot >= MEDIUM_TARGET:
            t_medium = probs[i]
    sel = [i for i in range(len(probs)) if probs[i] >= t_medium]
    d_all = [d for i in sel for d in dels[i]]
    deletion_precision = round(float(np.mean(d_all)), 4) if d_all else None  # None: no testable deletion at all
    med_cov = len(sel) / len(probs)
    print(f"calibration: medium >= {t_medium:.4f}: high+medium coverage {med_cov:.3f}, "
          f"deletion precision {deletion_precision} over {len(d_all)} sites")

    # Held-out test figures for the card (the benchmark recomputes them through the frontend)
    test_words = [w for w, _ in parts["test"]]
    tp = predict_words(model, test_words)
    ok_t, by_group = [], Counter()
    high_ok = high_n = 0
    for (w, _), (_, p, _), ok in zip(parts["test"], tp, agrees(parts["test"], tp)):
        ok_t.append(ok)
        if p >= t_high:
            high_n += 1
            high_ok += ok
        for g in word_groups(w):
            by_group[(g, "n")] += 1
            by_group[(g, "ok")] += ok
    groups = {g: {"n": by_group[(g, "n")], "agreement": round(by_group[(g, "ok")] / by_group[(g, "n")], 4)}
              for g in sorted({g for g, _ in by_group})}
    test = {"words": len(test_words), "agreement": round(float(np.mean(ok_t)), 4),
            "high_agreement": round(high_ok / max(high_n, 1), 4), "high_coverage": round(high_n / len(test_words), 4),
            "groups": groups}
    print("test:", json.dumps(test, ensure_ascii=False))

    card = {
        "name": "leakloss Nepali inherent-vowel retention model",
        "model": f"HistGradientBoostingClassifier (scikit-learn), {clf.n_iter_} trees, <= {args.max_leaf_nodes} "
                 f"leaves each, learning rate {args.learning_rate}, l2 {args.l2}, min {args.min_samples_leaf} rows a leaf, "
                 f"{args.max_features:.0%} of features tried a split; exported to JSON, evaluated in numpy"
                 + ("" if net is None else
                    f"; mixed in log-odds (weight {net_weight} on the networks) with the mean log-odds of "
                    f"{len(nets)} BiLSTMs over the word's units, each unit's letters, the rules' decision and its "
                    f"hunspell morphology (leakloss.text.retention_net: {net.lstm.num_layers} "
                    f"layers, {net.lstm.hidden_size} a direction, {sum(p.numel() for p in net.parameters())} "
                    f"parameters each, {args.net_epochs} epochs, seeds {args.seed}..{args.seed + len(nets) - 1}; "
                    f"float32 weights in {NET_FILE}, run in numpy)"),
        "features": "per written inherent vowel: letters (consonant, vowel sign/virama/inherent) of the 4 units "
                    "either side, nasal signs and visarga of 2 either side, position, unit/slot counts, the rules' "
                    "decision and rule name, neighbouring slots' rule decisions, stem/suffix split, first suffix, "
                    "compound boundaries, stem and word ending class, vowel-sign and conjunct counts; context "
                    f"memory (target encoding): smoothed keep rate and count among the training vowels of "
                    f"{len(CONTEXT_NAMES)} spelling contexts ({', '.join(CONTEXT_NAMES)}), contexts seen "
                    f">= {args.memory_min_count} times, {len(memory)} remembered; the training rows' memory "
                    f"features are counted out of fold ({MEMORY_FOLDS} folds by the second-last sha1 digit); "
                    f"word vocabulary of the {len(fit.vocabulary)} fit words (64-bit hashes of spellings, prefixes "
                    f"and endings with counts; no spelling stored): is the spelling up to the vowel's letter a "
                    f"word, is the rest one, how many words start / end so, and how many verb forms (-नु -यो -छ "
                    f"-एको ...) the part up to the letter, the word, and the word without a verb ending take as a "
                    f"root; training rows read it leave-one-out; "
                    + (f"word forms of a hunspell dictionary ({len(morphology)} forms of {morphology.source}, "
                       f"64-bit hashes with what made each: listed stem, verb or nominal rule, affix lengths): is "
                       f"the word a form, a verb / nominal form, the slot's distance to the affix, are its pieces "
                       f"forms, is the part up to the letter + halanta a form or a verb root"
                       if len(morphology) else "no morphology dictionary (its features constant)"),
        "training_data": {
            "source": "google/language-resources ne/data/lexicon.tsv (Google, 2018), the development "
                      "part shared with this project (lexicon-dev.tsv, 34,054 entries); not in this repository",
            "license": "CC BY 4.0 (https://creativecommons.org/licenses/by/4.0/); attribution: Google, "
                       "Nepali pronunciation lexicon, google/language-resources. The model is trained on it.",
            "labels": "an inherent vowel is kept when the lexicon's phones pronounce it (ax), aligned to the "
                      "spelling by leakloss.text.g2p.inherent_vowel_pattern; words whose phones do not align "
                      "are left out of training (counted as wrong in evaluation)",
            "split": "last hex digit of sha1(normalised spelling, UTF-8): 0-2 held-out test, 3-f fit "
                     "(3-4, `calibration`, and 5-f, `train`: the words the hand-written rules were written on)",
            "words": {k: len(v) for k, v in parts.items()}, "train_rows": fit.rows,
        },
        **({"morphology_data": {
            "source": "hunspell-ne (Debian package, from LibreOffice dictionaries): ne_NP.dic / ne_NP.aff, "
                      f"{len(morphology)} word forms expanded from its stems and affix rules, stored as 64-bit hashes",
            "license": "LGPL-2.1; copyright Madan Puraskar Pustakalaya (Nepali spell-checker dictionary)",
        }} if len(morphology) else {}),
        "calibration": {
            "method": f"out of fold: the {len(fit_words)} fit words in {CALIBRATION_FOLDS} folds (sha1 hex digits "
                      f"-7..-6 mod {CALIBRATION_FOLDS}), each predicted by trees (and network) fitted on the other "
                      f"folds; the network's mix weight is the one of {list(NET_WEIGHTS)} with the most `high` "
                      f"coverage there",
            "word_probability": ("product over the word's free vowels (not the forced ones) of max(p, 1 - p)"
                                 if phonotactics is None else
                                 "the chosen pattern's posterior among the word's candidate patterns (softmax of "
                                 "their rescored log-scores, leakloss.text.phonotactics)"),
            "high": {"threshold": t_high, "target": HIGH_TARGET, "agreement": round(acc_high, 4),
                     "coverage": round(cov_high, 4)},
            "medium": {"threshold": t_medium, "target_deletion_precision": MEDIUM_TARGET,
                       "coverage_high_or_medium": round(med_cov, 4),
                       "deletion_precision": deletion_precision, "deletion_sites": len(d_all)},
            "agreement": round(float(np.mean(correct)), 4),
            "network_weight": {"chosen": net_weight, "tried": {str(w): {"high_coverage": round(v[0][2], 4),
                                                                        "agreement": round(v[1], 4)}
                                                                for w, v in weights.items()}},
        },
        **({"phonotactics": {
            "model": "n-grams of the fit words' patterns (the lexicon's keep/drop decisions written out by "
                     "leakloss.text.phonotactics.pattern_tokens), interpolated absolute discounting over Kneser-Ney "
                     "continuation unigrams, stored as 64-bit hashes with counts: " + "; ".join(
                         f"{k} order {orders[k]}, {len(m)} n-grams, {len(m.history_keys)} histories"
                         for k, m in final_ngrams.items()),
            "rescoring": "A word's candidate patterns (all, or a beam when more than 6 free slots) scored "
                         "sum log P(slot decision) + sum of weight * log P_ngram(tokens) + keep_bonus * kept vowels",
            "weights": dict(zip(orders, rescoring[0])), "keep_bonus": rescoring[1],
            "chosen": f"the most out-of-fold agreement over weights {[PHONOTACTIC_WEIGHTS[k] for k in orders]} x keep "
                      f"bonuses {list(KEEP_BONUSES)}, each fold's words scored by n-grams counted without them",
            "out_of_fold_agreement": {"rescored": round(float(np.mean(correct)), 4), "not_rescored": round(plain, 4)},
        }} if phonotactics is not None else {}),
        "held_out_test": test,
        "export_check_max_abs_diff": diff,
        "trained_with": {"script": "python -m leakloss.text.train_retention", "seconds": round(time.time() - t0),
                         "folds_resumed": resumed},
    }
    thresholds = {"high": t_high, "medium": t_medium}
    files: dict[str | Path, bytes] = {}
    if net is not None:
        spec, weights_bytes, _ = model_with_net(fit, nets, net_weight, thresholds, {"see": "retention.card.json"},
                                                phonotactics)
        files[args.out / NET_FILE] = weights_bytes
    else:
        spec = export_trees(clf, n_cat_values, thresholds, {"see": "retention.card.json"}, memory, fit.vocabulary,
                            morphology, phonotactics=phonotactics)
    files[args.out / "retention.json"] = json.dumps(spec, separators=(",", ":")).encode("utf-8")
    args.out.mkdir(parents=True, exist_ok=True)
    # each file whole or not at all (a reader, or the frontend loading in another process, never sees half a
    # model); the trees and the network's weights as one unit (the JSON names the weights' sha256)
    write_files_atomic(files)
    if net is None and (args.out / NET_FILE).exists():
        (args.out / NET_FILE).unlink()  # a trees-only model: a network file left beside it would mislead
    write_text_atomic(args.out / "retention.card.json", json.dumps(card, ensure_ascii=False, indent=1) + "\n")
    write_text_atomic(args.out / "retention.md", card_markdown(card))
    print(f"wrote {args.out / 'retention.json'} ({(args.out / 'retention.json').stat().st_size} bytes) "
          f"and the card ({time.time() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
