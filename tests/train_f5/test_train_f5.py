"""The Hindi-base F5 trainer on a tiny budget: corpus cache, batches, a resumable run, the shipped card."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("f5_tts")


def test_test_words_never_enter_the_phrases():
    from train_f5.data import is_test_word, phrases

    sentences = ["आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।", "तिमी यो दसैंमा घर कहिले आउँछौ?"] * 3
    out = phrases(sentences, max_words=3, seed=1)
    assert out and len(out) == len(set(out))
    assert not any(is_test_word(w) for p in out for w in p.split())
    assert all(1 <= len(p.split()) <= 3 for p in out)


def test_pair_batches_respect_the_frame_budget_and_join_same_voice_readings():
    from train_f5.data import MelCorpus, pair_batches

    lengths = [30, 50, 40, 20]
    mels = torch.cat([torch.full((n, 100), float(i)) for i, n in enumerate(lengths)]).half()
    offsets = torch.tensor([0, 30, 80, 120, 140])
    phones = [["k", "ʌ"], ["kʰ", "ʌ"], ["g", "ʌ"], ["gʱ", "ʌ"]]
    corpus = MelCorpus(mels, offsets, ["क", "ख", "ग", "घ"], ["v0", "v1", "v0", "v1"], phones)
    batches = pair_batches(corpus, max_frames=200, pair_prob=0.5, seed=0)
    seen_pair = False
    for _ in range(20):
        mel, lens, texts, batch_phones = next(batches)
        for text, said in zip(texts, batch_phones):  # a joined item says A's phones, then B's
            assert said == [p for part in text.split() for p in phones["कखगघ".index(part)]]
        assert mel.shape[0] == len(texts) == lens.numel() and mel.shape[0] * mel.shape[1] <= max(200, int(lens.max()))
        for k, text in enumerate(texts):
            parts = text.split()
            if len(parts) == 2:
                seen_pair = True
                a, b = ("कखगघ".index(p) for p in parts)
                assert corpus.voices[a] == corpus.voices[b]
                assert int(lens[k]) == lengths[a] + lengths[b]
    assert seen_pair


def test_joined_batches_carry_each_readings_sites_shifted_by_the_first_reading():
    from dataclasses import replace

    from leakloss.constants import MEL_HOP, MEL_SAMPLE_RATE
    from leakloss.timing import TimedSite
    from train_f5.data import joined_batches

    texts = ["क", "ख", "ग", "घ", "ङ", "च"]
    voices = [f"v{i % 2}" for i in range(6)]
    items = [(torch.full((20 + 7 * i, 100), float(i)), texts[i],
              [TimedSite(0.01 * (i + 1), 0.01 * (i + 2), "deletion", "ʌ->∅")] if i % 3 == 0 else [])
             for i in range(6)]
    joined, batches = 0, joined_batches(voices, items.__getitem__, 300, 0.5, 0)
    for _ in range(30):
        mel, lens, got_texts, sites = next(batches)
        assert mel.shape[0] == lens.numel() == len(got_texts) == len(sites)
        for text, item_sites in zip(got_texts, sites):
            parts = [texts.index(p) for p in text.split()]
            want = list(items[parts[0]][2])
            if len(parts) == 2:
                joined += 1
                a, b = parts
                assert voices[a] == voices[b]  # one voice
                offset = items[a][0].shape[0] * MEL_HOP / MEL_SAMPLE_RATE
                want += [replace(s, start=s.start + offset, end=s.end + offset) for s in items[b][2]]
            assert item_sites == want
    assert joined > 0


def test_teacher_corpus_says_the_frontends_phones_under_its_own_key(tmp_path):
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES
    from train_f5.data import build_corpus, corpus_key

    voices = TRAIN_TEACHER_VOICES[:1]
    assert corpus_key(["नेकपा"], voices, teacher=True) != corpus_key(["नेकपा"], voices)
    espeak_own = build_corpus(["नेकपा"], voices, tmp_path, progress=False)
    teacher = build_corpus(["नेकपा"], voices, tmp_path, progress=False, teacher=True)
    assert not torch.equal(teacher.mel(0), espeak_own.mel(0))  # another path: phoneme input, not espeak's rules
    from leakloss.speech.corpus import teacher_reading
    from leakloss.text.frontend import NepaliFrontend
    from leakloss.text.phones import coarse

    said = teacher_reading("नेकपा", voices[0]).phones
    assert [coarse(p) for p in said] == [coarse(p) for p in NepaliFrontend().pronounce("नेकपा").phones]


@pytest.mark.slow
def test_tiny_run_checkpoints_resumes_and_ships_a_card(tmp_path):
    from leakloss.config import compose_config
    from train_f5.__main__ import run

    overrides = ["model.dim=32", "model.depth=1", "model.heads=2", "model.dim_head=16", "model.text_dim=16",
                 "model.conv_layers=1", "data.max_texts=12", "data.max_frames=400", "max_steps=3", "warmup_steps=2",
                 f"cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / 'out'}", "log_every=1"]
    first = run(compose_config("train_f5", overrides))
    assert first["step"] == 3 and first["runs"] == 1
    second = run(compose_config("train_f5", overrides[:-5] + ["max_steps=5"] + overrides[-4:]))
    assert second["step"] == 5 and second["runs"] == 2  # resumed, not restarted
    (tmp_path / "out" / "optimizer.safetensors").unlink()  # a committed checkpoint: weights only
    third = run(compose_config("train_f5", overrides[:-5] + ["max_steps=6"] + overrides[-4:]))
    assert third["step"] == 6 and third["runs"] == 3
    from leakloss.checks import ResumeError

    with pytest.raises(ResumeError, match="its checkpoint cannot be continued"):  # another architecture
        run(compose_config("train_f5", ["model.dim=48"] + overrides[1:]))
    # a switch that changes no weight shape: the weights would load, and be trained as what they are not
    with pytest.raises(ResumeError, match="text_embedding_average_upsampling=True; this run: .*=False"):
        run(compose_config("train_f5", ["model.text_embedding_average_upsampling=false"] + overrides))
    other_texts = [o if o != "data.max_texts=12" else "data.max_texts=13" for o in overrides]
    with pytest.raises(ResumeError, match="trained on other texts"):  # its card would describe another corpus
        run(compose_config("train_f5", other_texts))
    for name in ("checkpoint.safetensors", "checkpoint.json"):  # what is committed: the EMA model and its card
        (tmp_path / "out" / name).unlink()
    with pytest.raises(ResumeError, match="another architecture"):  # the committed model's card says the same
        run(compose_config("train_f5", ["model.text_embedding_average_upsampling=false"] + overrides))
    fourth = run(compose_config("train_f5", overrides[:-5] + ["max_steps=7"] + overrides[-4:]))
    assert fourth["step"] == 7 and fourth["runs"] == 4
    assert (tmp_path / "out" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    card = json.loads((tmp_path / "out" / "model.json").read_text())
    assert [point["step"] for point in card["learning_curve"]] == [3, 5, 6, 7]  # the curve carries over resumptions
    assert card["steps"] == 7 and card["runs"] == 4 and card["parameters"] > 0 and set(card["probe_per"]) == {"a", "b"}
    assert all(0 <= per for point in card["learning_curve"] for per in point["probe_per"].values())
    from safetensors.torch import load_file

    from train_f5.model import hindi_base_f5

    model = hindi_base_f5(dim=32, depth=1, heads=2, dim_head=16, text_dim=16, conv_layers=1)
    model.load_state_dict(load_file(str(tmp_path / "out" / "model.safetensors")))


def test_synthesize_returns_16k_audio_of_the_infilled_frames():
    """The vocoder already resamples to 16 kHz: the synthesis must not be resampled a second time (it was: the
    probe then heard speech 1.5x too fast and too high)."""
    from leakloss.vocoder import MelToWave, mel_lengths_to_samples
    from train_f5.evaluate import infill, synthesize
    from train_f5.model import hindi_base_f5

    model = hindi_base_f5(dim=32, depth=1, heads=2, dim_head=16, text_dim=16, conv_layers=1).eval()
    vocoder = MelToWave.tiny(0)
    prompt = torch.randn(40, 100)
    mel = infill(model, prompt, "कखग", "घङ", steps=2, seed=3)
    wave = synthesize(model, prompt, "कखग", "घङ", vocoder, steps=2, seed=3)
    assert mel.shape == (27, 100)  # ceil(40 frames * 2 chars / 3 chars)
    assert wave.dim() == 1 and wave.numel() == mel_lengths_to_samples(mel.shape[0])


@pytest.mark.parametrize("override, message", [
    ("model.dim=0", "model: ValueError: dim must be a whole number >= 1, got 0"),  # a 74-line RuntimeError
    ("model.heads=-2", "model: ValueError: heads must be a whole number >= 1, got -2"),
])
def test_model_sizes_that_cannot_work_are_a_settings_error_before_the_corpus(tmp_path, override, message, monkeypatch):
    from leakloss.checks import SettingsError
    from leakloss.config import compose_config
    from train_f5 import data
    from train_f5.__main__ import run

    monkeypatch.setattr(data, "build_corpus", lambda *a, **k: pytest.fail("the corpus was built"))
    with pytest.raises(SettingsError, match=message):
        run(compose_config("train_f5", [override, f"out_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'c'}"]))


def test_learning_rate_warms_up_holds_and_decays():
    from train_f5.__main__ import learning_rate

    assert learning_rate(0, 1.0, 4) == 0.25 and learning_rate(3, 1.0, 4) == 1.0 and learning_rate(500, 1.0, 4) == 1.0
    assert learning_rate(10, 1.0, 4, warm_from=10) == 0.25  # a fresh optimizer warms up again
    kw = {"decay_start": 100, "decay_steps": 50, "min_lr": 0.1}
    assert learning_rate(99, 1.0, 4, **kw) == 1.0
    assert learning_rate(125, 1.0, 4, **kw) == pytest.approx(0.55)
    assert learning_rate(150, 1.0, 4, **kw) == pytest.approx(0.1) == learning_rate(10_000, 1.0, 4, **kw)
    assert learning_rate(120, 1.0, 4, warm_from=120, **kw) == 0.25  # warm-up below the decayed rate wins


@pytest.mark.slow
def test_a_signal_stops_the_run_with_a_final_checkpoint(tmp_path, monkeypatch):
    import os
    import signal

    import train_f5.__main__ as entry
    from leakloss.config import compose_config

    overrides = ["model.dim=32", "model.depth=1", "model.heads=2", "model.dim_head=16", "model.text_dim=16",
                 "model.conv_layers=1", "data.max_texts=12", "data.max_frames=400", "max_steps=1000000",
                 f"cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / 'out'}", "max_minutes=3"]
    before = signal.getsignal(signal.SIGTERM)
    seed_step = entry.seed_step

    def signalled_at_step_2(seed, step):  # the signal arrives mid-run whatever the machine's speed (a 3 s timer
        if step == 2:                     # fired before the first step on a busy machine: nothing was saved)
            os.kill(os.getpid(), signal.SIGTERM)
        seed_step(seed, step)

    monkeypatch.setattr(entry, "seed_step", signalled_at_step_2)
    info = entry.run(compose_config("train_f5", overrides))
    assert info["step"] == 3 and info["minutes"] < 2  # the step under way finishes, then the run stops
    saved = json.loads((tmp_path / "out" / "checkpoint.json").read_text())
    assert saved["step"] == info["step"] and (tmp_path / "out" / "model.safetensors").is_file()
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


@pytest.mark.parametrize("override, message", [
    ("ema_decay=nan", "ema_decay must be a finite number in [0, 1], got nan"),  # exported an all-NaN model
    ("log_every=0", "log_every must be a whole number >= 1, got 0"),  # ZeroDivisionError mid-run
    ("lr=nan", "lr must be a finite number in (0, inf), got nan"),
    ("max_steps=0", "max_steps must be a whole number >= 1, got 0"),  # saved a 0-step model with exit 0
    ("seed=-1", "seed must be a whole number in [0, 4294967295], got -1"),  # was taken unchecked
    ("seed=18446744073709551616", "seed must be a whole number in [0, 4294967295], got 18446744073709551616"),
])
def test_settings_that_cannot_work_are_one_error_line_before_the_corpus(tmp_path, override, message):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "train_f5", override, f"hydra.run.dir={tmp_path / 'run'}",
                        f"out_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"], cwd=root,
                       env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == f"error: {message}", r.stderr[-2000:]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_a_checkpoint_that_cannot_be_read_is_one_error_line_before_the_corpus(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "checkpoint.safetensors").write_bytes(b"truncated")
    r = subprocess.run([sys.executable, "-m", "train_f5", f"hydra.run.dir={tmp_path / 'run'}",
                        f"out_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"], cwd=root,
                       env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: out_dir={tmp_path / 'out'}: its checkpoint cannot be continued")
    assert "Traceback" not in r.stderr and not (tmp_path / "cache").exists()


def test_a_budget_too_small_for_one_step_saves_nothing(tmp_path):
    from leakloss.checks import UntrainedError
    from leakloss.config import compose_config
    from train_f5.__main__ import run

    overrides = ["model.dim=32", "model.depth=1", "model.heads=2", "model.dim_head=16", "model.text_dim=16",
                 "model.conv_layers=1", "data.max_texts=4", "data.max_frames=400", "max_minutes=1e-9",
                 f"cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / 'out'}"]
    with pytest.raises(UntrainedError, match="no training step ran"):
        run(compose_config("train_f5", overrides))
    assert not (tmp_path / "out" / "model.safetensors").exists()
    assert not (tmp_path / "out" / "checkpoint.safetensors").exists()


TINY_F5 = ["model.dim=32", "model.depth=1", "model.heads=2", "model.dim_head=16", "model.text_dim=16",
           "model.conv_layers=1", "data.max_texts=12", "data.max_frames=400", "log_every=1", "probe.recognizers=[a]"]


def _tiny_f5_run(tmp_path, out: str, *overrides: str) -> dict:
    from leakloss.config import compose_config
    from train_f5.__main__ import run

    return run(compose_config("train_f5", TINY_F5 + [f"cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / out}",
                                                     *overrides]))


def _weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "checkpoint.safetensors")) | load_file(str(folder / "optimizer.safetensors"))


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert torch.equal(value, b[key]), key


@pytest.mark.slow
def test_a_seeded_run_is_reproducible_and_a_resumed_run_is_the_uninterrupted_one(tmp_path, monkeypatch):
    # torch's generator was never seeded (noise, time, dropout) and a resume at step k re-seeded the batch stream
    # with seed + k: two runs with one seed differed, and 2 steps + a resume to 4 differed from 4 steps
    import shutil

    from train_f5 import evaluate

    monkeypatch.setattr(evaluate, "probe_phone_error_rates", lambda *a, **k: {"a": 0.5})  # not what is tested
    _tiny_f5_run(tmp_path, "whole", "max_steps=4", "warmup_steps=2")
    _tiny_f5_run(tmp_path, "again", "max_steps=2", "warmup_steps=2")
    _tiny_f5_run(tmp_path, "resumed", "max_steps=2", "warmup_steps=2")
    _assert_same(_weights(tmp_path / "again"), _weights(tmp_path / "resumed"))  # one seed: one run
    assert _tiny_f5_run(tmp_path, "resumed", "max_steps=4", "warmup_steps=2")["runs"] == 2
    _assert_same(_weights(tmp_path / "whole"), _weights(tmp_path / "resumed"))
    # from the shipped model (weights only: a fresh optimizer warming up again from step 4), then resumed: its
    # checkpoint keeps where the warm-up started (the resume warmed up from step 0 again)
    for name in ("shipped", "shipped_resumed"):
        (tmp_path / name).mkdir()
        for file in ("model.safetensors", "model.json"):
            shutil.copy(tmp_path / "whole" / file, tmp_path / name / file)
    _tiny_f5_run(tmp_path, "shipped", "max_steps=6", "warmup_steps=4")
    _tiny_f5_run(tmp_path, "shipped_resumed", "max_steps=5", "warmup_steps=4")
    _tiny_f5_run(tmp_path, "shipped_resumed", "max_steps=6", "warmup_steps=4")
    _assert_same(_weights(tmp_path / "shipped"), _weights(tmp_path / "shipped_resumed"))


@pytest.mark.slow
def test_a_continued_shipped_model_is_checked_against_its_texts_and_the_card_says_what_was_read(
        tmp_path, monkeypatch, capsys):
    from leakloss.checks import ResumeError
    from train_f5 import data, evaluate

    monkeypatch.setattr(evaluate, "probe_phone_error_rates", lambda *a, **k: {"a": 0.5})
    monkeypatch.setattr(data, "DEFAULT_PROMPTS", tmp_path / "absent" / "prompts.tsv")  # the shared file not there
    monkeypatch.delenv("LEAKLOSS_PROMPTS", raising=False)
    _tiny_f5_run(tmp_path, "out", "max_steps=2")
    assert f"warning: data.prompts: {tmp_path / 'absent' / 'prompts.tsv'} is not there" in capsys.readouterr().err
    card = json.loads((tmp_path / "out" / "model.json").read_text())
    assert "the built-in sentences only" in card["training_data"] and "Nepali prompts" not in card["training_data"]
    assert card["texts_sources"] == {"built_in_sentences": True, "prompts": None}
    for name in ("checkpoint.safetensors", "checkpoint.json", "optimizer.safetensors"):  # what is committed
        (tmp_path / "out" / name).unlink()
    with pytest.raises(ResumeError, match="trained on other texts"):  # was continued on any corpus
        _tiny_f5_run(tmp_path, "out", "max_steps=3", "data.max_texts=5")
    with pytest.raises(ResumeError, match="trained on other texts"):
        _tiny_f5_run(tmp_path, "out", "max_steps=3", "seed=5")
    assert _tiny_f5_run(tmp_path, "out", "max_steps=3")["step"] == 3
    # a card written before the hash was recorded: a warning, and its data is carried into the new card
    for name in ("checkpoint.safetensors", "checkpoint.json", "optimizer.safetensors"):
        (tmp_path / "out" / name).unlink()
    old = json.loads((tmp_path / "out" / "model.json").read_text())
    old = {k: v for k, v in old.items() if k not in ("texts_sha256", "texts_sources")}
    (tmp_path / "out" / "model.json").write_text(json.dumps(old | {"training_data": "what an old card said"}))
    capsys.readouterr()
    assert _tiny_f5_run(tmp_path, "out", "max_steps=4")["step"] == 4
    assert "saved without the hash of the texts" in capsys.readouterr().err
    card = json.loads((tmp_path / "out" / "model.json").read_text())
    assert card["earlier_training_data"] == {"until_step": 3, "training_data": "what an old card said",
                                             "texts_sha256": None}
    assert card["texts_sha256"] and "the built-in sentences only" in card["training_data"]


def test_a_prompts_file_given_that_is_not_there_is_a_settings_error_before_the_corpus(tmp_path, monkeypatch):
    # data.prompts=/typo.tsv cut the corpus from ~6259 phrases to 1192 without a word
    from leakloss.checks import SettingsError
    from leakloss.config import compose_config
    from train_f5 import data
    from train_f5.__main__ import run

    monkeypatch.setattr(data, "build_corpus", lambda *a, **k: pytest.fail("the corpus was built"))
    typo = tmp_path / "typo.tsv"
    with pytest.raises(SettingsError, match=f"data.prompts={typo}: no such file"):
        run(compose_config("train_f5", TINY_F5 + [f"data.prompts={typo}", f"out_dir={tmp_path / 'out'}",
                                                  f"cache_dir={tmp_path / 'c'}"]))
    from train_f5.__main__ import corpus_sources

    (tmp_path / "empty.tsv").write_text("")
    with pytest.raises(SettingsError, match="data.prompts=.*empty.tsv: .*no sentence"):
        corpus_sources(compose_config("train_f5", [f"data.prompts={tmp_path / 'empty.tsv'}"]))
    prompts = tmp_path / "prompts.tsv"
    prompts.write_text("id1\tतिमी यो दसैंमा घर कहिले आउँछौ?\n", encoding="utf-8")
    _texts, read = corpus_sources(compose_config("train_f5", [f"data.prompts={prompts}"]))
    assert read == prompts


def test_the_default_prompts_not_there_is_a_warning_and_no_prompts(tmp_path, monkeypatch, capsys):
    from leakloss.config import compose_config
    from train_f5 import data
    from train_f5.__main__ import corpus_sources, texts_description

    monkeypatch.setattr(data, "DEFAULT_PROMPTS", tmp_path / "absent.tsv")
    monkeypatch.delenv("LEAKLOSS_PROMPTS", raising=False)
    texts, read = corpus_sources(compose_config("train_f5"))
    assert texts and read is None and "warning: data.prompts:" in capsys.readouterr().err
    assert texts_description(None)["prompts"] is None
    monkeypatch.setenv("LEAKLOSS_PROMPTS", str(tmp_path / "also_absent.tsv"))  # the default's other home
    _texts, read = corpus_sources(compose_config("train_f5"))
    assert read is None and f"{tmp_path / 'also_absent.tsv'} is not there" in capsys.readouterr().err
    monkeypatch.setattr(data, "DEFAULT_PROMPTS", tmp_path / "prompts.tsv")
    (tmp_path / "prompts.tsv").write_text("id1\tतिमी यो दसैंमा घर कहिले आउँछौ?\n", encoding="utf-8")
    assert "Nepali prompts" in texts_description(tmp_path / "prompts.tsv")["text"]


def test_the_corpus_key_takes_espeaks_version(monkeypatch):
    from leakloss.speech import versions
    from leakloss.speech.synth import HINDI_VOICES
    from train_f5.data import corpus_key

    voices = list(HINDI_VOICES[:1])
    key = corpus_key(["नेकपा"], voices)
    monkeypatch.setattr(versions, "espeak_version", lambda: "espeak-ng 9.9")
    assert corpus_key(["नेकपा"], voices) != key
