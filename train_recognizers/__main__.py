"""Train one embedded recognizer: ``python -m train_recognizers recognizer_arch=a`` (or ``b``).

Time-budgeted and resumable: every ``checkpoint_every`` steps the weights, Adam moments and counters go to
``checkpoint_dir`` (safetensors + JSON, never pickles); rerunning the same command after an interruption, or with a
larger ``max_minutes`` / ``max_steps``, continues from there (a checkpoint of other data or settings is refused)."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path

import hydra
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from leakloss.acoustic.recognizer_training import (
    RECOGNIZER_FILES,
    CorpusCTCDataset,
    LengthBucketSampler,
    PrintProgress,
    RecognizerModule,
    build_vocab,
    collate_ctc,
    save_recognizer,
)
from leakloss.checks import (
    ResumeError, SettingsError, UntrainedError, check_choices, check_config, check_trained, first_line,
    is_finite_number,
)
from leakloss.acoustic.whisper_training import check_resumable, check_run_folders, load_checkpoint, save_checkpoint
from leakloss.config import check_trainer, config_dir, instantiate_setting
from leakloss.speech.corpus import (
    ROLES, SentenceFileError, build_corpus, builtin_sentences, check_builtin_heldout, read_sentences,
    split_for_training,
)


def check_settings(cfg: DictConfig) -> None:
    """:class:`~leakloss.checks.SettingsError` for a setting that cannot work (``batch_size=0``, ``lr=nan``, an
    unknown role, ...) or :class:`~leakloss.checks.ResumeError` for an ``init_from`` that cannot be continued."""
    positive = (0.0, math.inf, False)
    check_config(cfg, whole={"batch_size": 1, "warmup_steps": 0, "max_steps": 1, "num_threads": 1,
                             "progress_every": 1, "readings_per_sentence": 1, "checkpoint_every": 1},
                 numbers={"lr": positive, "max_minutes": positive, "heldout_fraction": (0.0, 1.0, True)},
                 folders=("cache_dir", "out_dir", "checkpoint_dir"), seeds=("recognizer_arch.seed",))
    check_choices(cfg, "roles", [r for r in ROLES if r != "recorded"])  # recorded voices: train_recognizers.whisper
    try:
        check_builtin_heldout(cfg.sentences, cfg.heldout_fraction)
    except ValueError as err:
        raise SettingsError(str(err)) from None
    check_run_folders(cfg.out_dir, RECOGNIZER_FILES, cfg.checkpoint_dir)
    written = OmegaConf.to_container(cfg.trainer, resolve=False)
    for key, own in (("max_steps", "${max_steps}"), ("max_time", {"minutes": "${max_minutes}"})):
        if written.get(key) != own:  # replaced by the run's budget left: trainer.max_steps=3 trained 24 steps
            budget = "max_steps" if key == "max_steps" else "max_minutes"
            raise SettingsError(f"trainer.{key} is the run's budget: set {budget} instead")
    check_trainer(cfg.trainer)  # gradient_clip_val=nan, accumulate_grad_batches=0: tracebacks after the corpus
    if cfg.get("init_from"):
        folder = Path(cfg.init_from)
        try:
            json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
            card = json.loads((folder / "card.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ResumeError(f"init_from={folder}: not a saved recognizer folder ({err})") from None
        # the new card adds to these: a card without them failed with a KeyError after the training
        if not (isinstance(card, dict) and all(is_finite_number(card.get(k)) for k in ("training_minutes", "steps"))):
            raise ResumeError(f"init_from={folder}: its card.json lacks the numbers 'training_minutes' and 'steps' "
                              "that a continued card adds to")
        bad = [k for k in ("total_training_minutes", "total_steps") if k in card and not is_finite_number(card[k])]
        if bad:  # total_steps: null passed here and failed with a TypeError after the training
            raise ResumeError(f"init_from={folder}: its card.json's {' and '.join(bad)} is not a number")
        # another kind or architecture was refused only after the corpus (a Whisper head as "its vocabulary differs")
        if card.get("class") != "Wav2Vec2ForCTC":
            raise ResumeError(f"init_from={folder}: a {card.get('class')!r} recognizer, not a Wav2Vec2ForCTC one: "
                              "this trainer cannot continue it")
        wanted = OmegaConf.to_container(cfg.recognizer_arch.arch, resolve=True)
        if card.get("architecture") != wanted:
            raise ResumeError(f"init_from={folder}: its architecture {card.get('architecture')} is not this run's "
                              f"recognizer_arch.arch {wanted}; choose the recognizer_arch it was trained with")
        from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError

        try:  # NaN or foreign weights were found only after the training ("the training diverged")
            Recognizer.load(str(folder))
        except RecognizerLoadError as err:
            raise ResumeError(f"init_from={folder}: {first_line(err)}") from None


def continue_from(model, folder: Path, vocab: dict[str, int]) -> None:
    """Load the weights of the saved recognizer ``folder`` into ``model``; :class:`ResumeError` when its
    vocabulary or architecture is not this run's, or its weights cannot be read."""
    from transformers import Wav2Vec2ForCTC

    vocab_saved = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    if vocab_saved != vocab:
        raise ResumeError(f"init_from={folder}: its vocabulary differs from this corpus's; cannot continue from it")
    try:
        model.load_state_dict(Wav2Vec2ForCTC.from_pretrained(str(folder)).state_dict())
    except Exception as err:  # missing/corrupt weights (SafetensorError is its own kind), another architecture
        first = first_line(err) or type(err).__name__
        raise ResumeError(f"init_from={folder}: its weights cannot be loaded into this architecture ({first})") from None


def run_identity(cfg: DictConfig, train: list[str]) -> dict:
    """What a checkpoint must have been trained on to be continued: the sentences, voices, architecture, seed,
    batching and starting weights (the budget, LR and logging may change between runs)."""
    return {"train_sentences_sha256": hashlib.sha256("\n".join(train).encode()).hexdigest(),
            "roles": list(cfg.roles), "readings_per_sentence": cfg.readings_per_sentence,
            "architecture": OmegaConf.to_container(cfg.recognizer_arch.arch, resolve=True),
            "seed": int(cfg.recognizer_arch.seed), "batch_size": cfg.batch_size,
            "init_from": None if not cfg.get("init_from") else str(Path(cfg.init_from).expanduser().resolve())}


def read_checkpoint_state(ckpt_dir: Path) -> dict | None:
    """The counters of the checkpoint in ``ckpt_dir`` (None: none there); :func:`check_resumable` has read it."""
    state_file = ckpt_dir / "state.json"
    return json.loads(state_file.read_text(encoding="utf-8")) if state_file.exists() else None


class RecognizerCheckpoint(L.Callback):
    """Saves the model, Adam moments and counters to ``folder`` every ``every`` steps (and loads them back at the
    start of a resumed fit); on Ctrl-C says what a rerun resumes."""

    def __init__(self, folder: Path, every: int, identity: dict, sampler: LengthBucketSampler,
                 resume: dict | None) -> None:
        self.folder, self.every, self.identity, self.sampler = folder, every, identity, sampler
        self.resume = resume
        self.done_steps = resume["step"] if resume else 0
        self.spent_minutes = resume["minutes"] if resume else 0.0
        self.saved_step = self.done_steps
        self.batch_in_epoch = resume["batch_in_epoch"] if resume else 0
        self._start = time.time()

    def step(self, trainer) -> int:
        return self.done_steps + int(trainer.global_step)

    def minutes(self) -> float:
        return self.spent_minutes + (time.time() - self._start) / 60

    def on_train_start(self, trainer, module) -> None:
        self._start = time.time()
        if self.resume:  # the optimizer exists from here on: the weights and moments go back together
            load_checkpoint(self.folder, module.model, trainer.optimizers[0])

    def save(self, trainer, module, batch_in_epoch: int) -> None:
        state = {"step": self.step(trainer), "minutes": self.minutes(), "epoch": self.sampler.epoch - 1,
                 "batch_in_epoch": batch_in_epoch, "run": self.identity}
        save_checkpoint(self.folder, module.model, trainer.optimizers[0], state)
        self.saved_step = state["step"]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.batch_in_epoch = self.sampler.skipped + batch_idx + 1
        if module.diverged_at is None and self.step(trainer) % self.every == 0:
            self.save(trainer, module, self.batch_in_epoch)

    def on_exception(self, trainer, module, exception) -> None:
        if isinstance(exception, KeyboardInterrupt):  # Lightning exits 1 after this, with its own line only
            if self.saved_step > 0:
                kept = (f"the last checkpoint (step {self.saved_step}, {self.folder}) is kept; rerun the same "
                        "command to resume from it")
            else:
                kept = f"no checkpoint was written yet ({self.folder}): a rerun starts afresh"
            print(f"\ninterrupted at step {self.step(trainer)}: {kept}", file=sys.stderr)


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="train_recognizer")
def main(cfg: DictConfig) -> None:
    start = time.time()
    try:  # before anything is built or saved: a bad run must never replace a shipped recognizer
        check_settings(cfg)
        arch = instantiate_setting(cfg.recognizer_arch.arch, "recognizer_arch.arch")
        sentences = builtin_sentences() if cfg.sentences is None else read_sentences(cfg.sentences)
        train, held = split_for_training(sentences, cfg.heldout_fraction)
        ckpt_dir = Path(cfg.checkpoint_dir).expanduser()
        identity = run_identity(cfg, train)
        check_resumable(ckpt_dir, identity)
        resume = read_checkpoint_state(ckpt_dir)
        done, spent = (resume["step"], resume["minutes"]) if resume else (0, 0.0)
        # the budget left: the checkpoint's steps and minutes count (a rerun after Ctrl-C ends when the first would)
        steps_left, minutes_left = cfg.max_steps - done, cfg.max_minutes - spent
        if steps_left > 0 and minutes_left > 0:
            # trainer=gpu on a machine without one failed with Hydra's report after the whole corpus was built
            trainer = instantiate_setting(cfg.trainer, "trainer", max_steps=steps_left,
                                          max_time={"minutes": minutes_left},
                                          callbacks=[PrintProgress(every=cfg.progress_every)])
        elif resume:
            trainer = None  # the checkpoint's budget is spent: saved as it is
        else:
            raise SettingsError(f"max_steps={cfg.max_steps} / max_minutes={cfg.max_minutes}: no budget to train")
    except (SettingsError, ResumeError, SentenceFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(cfg.num_threads)
    corpus = build_corpus(train, Path(cfg.cache_dir).expanduser(), roles=list(cfg.roles),
                          readings_per_sentence=cfg.readings_per_sentence, seed=0)
    print(f"corpus: {len(corpus)} readings, {sum(i.duration for i in corpus.items) / 60:.1f} min, {time.time() - start:.0f}s")
    vocab = build_vocab([item.phones for item in corpus.items])
    seed = int(cfg.recognizer_arch.seed)
    L.seed_everything(seed)
    dataset = CorpusCTCDataset(corpus, corpus.items, vocab, augment=True, seed=seed)
    # the sampler sets the dataset's epoch as each epoch starts (a resumed run's too): each epoch augments anew
    sampler = LengthBucketSampler([i.duration for i in corpus.items], cfg.batch_size, seed=seed, dataset=dataset)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_ctc, num_workers=0)
    module = RecognizerModule(arch, vocab, seed=seed, lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                              total_steps=cfg.max_steps, budget_minutes=cfg.max_minutes, done_steps=done,
                              spent_minutes=spent)
    if cfg.get("init_from"):  # continue from a saved recognizer (same vocabulary), e.g. to extend a budget
        try:
            continue_from(module.model, Path(cfg.init_from), vocab)
        except ResumeError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
    checkpoints = RecognizerCheckpoint(ckpt_dir, cfg.checkpoint_every, identity, sampler, resume)
    if resume:
        sampler.epoch, sampler.skip = resume["epoch"], resume["batch_in_epoch"]
        print(f"resuming at step {done} ({spent:.1f} min spent) from {ckpt_dir}")
    if trainer is not None:
        trainer.callbacks.append(checkpoints)
        trainer.fit(module, loader)
        steps_now = int(trainer.global_step)
    else:  # nothing left to train: the checkpoint's weights are the result
        load_checkpoint(ckpt_dir, module.model, torch.optim.AdamW(module.model.parameters()))
        steps_now = 0
    if module.diverged_at is not None:
        print(f"error: the loss is not finite at step {done + module.diverged_at} (the training diverged; try a "
              f"lower lr than {cfg.lr}): nothing saved; the last checkpoint (step {checkpoints.saved_step}) is kept",
              file=sys.stderr)
        sys.exit(1)
    try:  # the default out_dir is the shipped recognizer: an untrained or diverged model never replaces it
        check_trained(done + steps_now, module.model.state_dict(), str(cfg.out_dir))
    except UntrainedError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    if trainer is not None and steps_now:  # what a rerun with a larger budget continues from
        checkpoints.save(trainer, module, checkpoints.batch_in_epoch)
    minutes = checkpoints.minutes() if trainer is not None else spent  # the fit's minutes, earlier runs' included
    n_params = sum(p.numel() for p in module.model.parameters())
    card = {
        "name": cfg.recognizer_arch.name, "class": "Wav2Vec2ForCTC", "parameters": n_params, "seed": seed,
        "architecture": dict(cfg.recognizer_arch.arch), "training_minutes": round(minutes, 1),
        "steps": done + steps_now, "corpus": corpus.root.name, "readings": len(corpus),
        "train_sentences_sha256": hashlib.sha256("\n".join(train).encode()).hexdigest(),
        "heldout_sentences": len(held), "label_set": "canonical (leakloss.text.phones.canonical)",
    }
    if cfg.get("init_from"):  # the card counts the whole training, earlier runs included
        previous = json.loads((Path(cfg.init_from) / "card.json").read_text(encoding="utf-8"))
        # what the weights were trained on before this run (its data, seed and its own history): a
        # continuation on other sentences is then visible in the card, not only this run's data
        card["continued_from"] = {k: previous.get(k) for k in (
            "training_minutes", "steps", "seed", "corpus", "readings", "train_sentences_sha256", "heldout_sentences",
            "continued_from") if k in previous}
        if previous.get("train_sentences_sha256") not in (None, card["train_sentences_sha256"]):
            print("warning: init_from was trained on other sentences than this run; its card's data is kept under "
                  "continued_from, and the held-out sentences of the two runs may overlap", file=sys.stderr)
        card["total_training_minutes"] = round(previous.get("total_training_minutes", previous["training_minutes"]) + minutes, 1)
        card["total_steps"] = previous.get("total_steps", previous["steps"]) + card["steps"]
    else:
        card["total_training_minutes"], card["total_steps"] = card["training_minutes"], card["steps"]
    out = save_recognizer(module.model.cpu(), vocab, cfg.out_dir, card)
    print(json.dumps(card, ensure_ascii=False))
    print(f"saved {out} after {minutes:.1f} min")


if __name__ == "__main__":
    from leakloss.config import exit_on_bad_overrides

    exit_on_bad_overrides("train_recognizer")  # a mistyped override is one error line, not Hydra's report
    try:
        main()
    except KeyboardInterrupt:  # outside the training loop (corpus, states, setup) it was a traceback
        print("\ninterrupted: no recognizer saved; the corpus cached so far and the last checkpoint are kept (a rerun resumes)", file=sys.stderr)
        sys.exit(130)
