"""Tests for leakloss.vocoder: frozen, differentiable mel -> 16 kHz wave."""

from __future__ import annotations

import math

import pytest
import torch
import torchaudio.functional as AF

from leakloss.vocoder import MelToWave, log_mel, mel_lengths_to_samples, save_vocoder

pytest.importorskip("vocos")


@pytest.fixture(scope="module")
def m2w() -> MelToWave:
    return MelToWave.tiny(seed=0)


@pytest.mark.parametrize("n_frames", [1, 2, 3, 37, 94])
def test_output_length_matches_mel_lengths_to_samples(m2w: MelToWave, n_frames: int) -> None:
    wave = m2w(torch.randn(2, n_frames, 100))
    assert wave.shape == (2, mel_lengths_to_samples(n_frames))
    assert mel_lengths_to_samples(n_frames) == math.ceil(n_frames * 256 * 16_000 / 24_000)


def test_mel_lengths_to_samples_on_tensors() -> None:
    lengths = torch.tensor([0, 1, 3, 94])
    out = mel_lengths_to_samples(lengths)
    assert out.dtype == torch.long
    assert out.tolist() == [mel_lengths_to_samples(int(n)) for n in lengths]


def test_gradient_reaches_mel_not_vocoder(m2w: MelToWave) -> None:
    mel = torch.randn(2, 20, 100, requires_grad=True)
    m2w(mel).pow(2).mean().backward()
    assert mel.grad is not None and mel.grad.abs().sum() > 0 and torch.isfinite(mel.grad).all()
    assert all(not p.requires_grad and p.grad is None for p in m2w.parameters())


def test_stays_frozen_in_eval_when_parent_trains(m2w: MelToWave) -> None:
    parent = torch.nn.ModuleDict({"v": m2w})
    parent.train()
    assert not m2w.training and not m2w.backbone.training and not m2w.head.training
    assert parent.training


def test_from_vocos_matches_decode_and_resamples() -> None:
    from vocos import Vocos
    from vocos.feature_extractors import MelSpectrogramFeatures

    tiny = MelToWave.tiny(seed=3)
    vocos = Vocos(MelSpectrogramFeatures(), tiny.backbone, tiny.head)
    mel = torch.randn(1, 30, 100)
    at_24k = MelToWave.from_vocos(vocos, sample_rate_out=24_000)(mel)
    torch.testing.assert_close(at_24k, vocos.decode(mel.transpose(1, 2)))
    at_16k = MelToWave.from_vocos(vocos)(mel)
    torch.testing.assert_close(at_16k, AF.resample(at_24k, 24_000, 16_000))
    assert not any(p.requires_grad for p in vocos.parameters())  # from_vocos freezes the shared modules


def test_tiny_is_seeded_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b, c = MelToWave.tiny(seed=1), MelToWave.tiny(seed=1), MelToWave.tiny(seed=2)
    assert torch.equal(torch.rand(3), expected)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_output_follows_input_dtype(m2w: MelToWave) -> None:
    wave = m2w.double()(torch.randn(1, 8, 100, dtype=torch.float64))
    assert wave.dtype == torch.float64
    m2w.float()


def test_log_mel_matches_vocos_and_f5_features() -> None:
    from f5_tts.model.modules import MelSpec
    from vocos.feature_extractors import MelSpectrogramFeatures

    wave = torch.randn(2, 12_000, generator=torch.Generator().manual_seed(0)) * 0.1
    ours = log_mel(wave)
    assert ours.shape == (2, 47, 100)
    torch.testing.assert_close(ours, MelSpectrogramFeatures()(wave).transpose(1, 2))
    torch.testing.assert_close(ours, MelSpec(mel_spec_type="vocos")(wave).transpose(1, 2))


def test_trainable_tiny_trains_and_save_load_roundtrip(tmp_path) -> None:
    vocoder = MelToWave.tiny(0, dim=16, num_layers=1, intermediate_dim=48, frozen=False)
    vocoder.train()
    assert vocoder.training and all(p.requires_grad for p in vocoder.parameters())
    mels = torch.randn(1, 10, 100)
    vocoder.generate(mels).pow(2).mean().backward()
    assert all(p.grad is not None for p in vocoder.parameters())
    card = {"dim": 16, "intermediate_dim": 48, "num_layers": 1, "n_fft": 1024, "hop_length": 256, "n_mels": 100}
    save_vocoder(tmp_path / "v", vocoder, card)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.json", "v.safetensors"]
    loaded = MelToWave.embedded(tmp_path / "v")
    assert not loaded.training and not any(p.requires_grad for p in loaded.parameters())
    torch.testing.assert_close(loaded(mels), vocoder.eval()(mels).detach())


def test_missing_vocoder_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="train_vocoder"):
        MelToWave.embedded(tmp_path / "nothing")


def test_embedded_vocoder_reconstructs_an_espeak_reading() -> None:
    from leakloss.speech.synth import HELDOUT_TEACHER_VOICE, speak_phones

    vocoder = MelToWave.embedded()
    assert vocoder.card["heldout_per_recognizer_a"]["vocoded"] < 0.3  # recognizer A still reads its output
    wave = AF.resample(speak_phones([["n", "e", "k", "ʌ", "p", "aː"]], HELDOUT_TEACHER_VOICE).waveform, 16_000, 24_000)
    mel = log_mel(wave[None])
    with torch.no_grad():
        out = vocoder.generate(mel)
    error = (log_mel(out)[:, : mel.shape[1]] - mel).abs().mean()  # log-mel L1; a random tiny Vocos gives ~2.0
    assert torch.isfinite(out).all() and error < 0.6, float(error)


def test_silence_past_lengths_writes_silent_frames_over_padding_and_a_tail():
    import math

    from leakloss.constants import MEL_FLOOR
    from leakloss.vocoder import VOCODER_TAIL_FRAMES, silence_past_lengths

    mels = torch.randn(2, 6, 100, requires_grad=True)
    out = silence_past_lengths(mels, torch.tensor([6, 2]))
    assert out.shape == (2, 6 + VOCODER_TAIL_FRAMES, 100)
    assert torch.equal(out[0, :6], mels[0]) and torch.equal(out[1, :2], mels[1, :2])
    assert bool((out[1, 2:] == math.log(MEL_FLOOR)).all()) and bool((out[0, 6:] == math.log(MEL_FLOOR)).all())
    out.sum().backward()
    assert bool((mels.grad[1, 2:] == 0).all()) and bool((mels.grad[1, :2] == 1).all())


_CARD = {"dim": 16, "intermediate_dim": 48, "num_layers": 1, "n_fft": 1024, "hop_length": 256, "n_mels": 100,
         "sample_rate": 24000}


@pytest.mark.parametrize("damage, message", [
    ({"dim": None}, "dim must be a whole number >= 1, got None"),  # was KeyError 'dim'
    ({"dim": "16"}, "dim must be a whole number >= 1, got '16'"),  # was "not all arguments converted"
    ({"num_layers": 1.5}, "num_layers must be a whole number"),
    ({"hop_length": 128}, "hop_length is 128, but the mel front end uses 256"),  # loaded and vocoded garbage
    ({"sample_rate": 16000}, "sample_rate is 16000, but the mel front end uses 24000"),
    ({"dim": 32}, "the weights do not fit the card's sizes"),  # was a multi-line RuntimeError
    ("[1, 2]", "a vocoder card is a JSON object, got list"),
    ("{not json", "not a readable vocoder card"),
    ("weights:truncated", "not readable safetensors"),
    ("weights:nan", "weights hold NaN/Inf"),
])
def test_a_damaged_vocoder_is_a_typed_load_error(tmp_path, damage, message) -> None:
    from leakloss.vocoder import VocoderLoadError

    vocoder = MelToWave.tiny(0, dim=16, num_layers=1, intermediate_dim=48)
    save_vocoder(tmp_path / "v", vocoder, _CARD)
    MelToWave.embedded(tmp_path / "v")  # the undamaged pair loads
    if isinstance(damage, dict):
        card = {k: v for k, v in (_CARD | damage).items() if v is not None}
        (tmp_path / "v.json").write_text(__import__("json").dumps(card), encoding="utf-8")
    elif damage == "weights:truncated":
        data = (tmp_path / "v.safetensors").read_bytes()
        (tmp_path / "v.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "weights:nan":
        state = {k: v.clone() for k, v in vocoder.state_dict().items()}
        next(v for v in state.values() if v.is_floating_point()).view(-1)[0] = float("nan")
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "v.safetensors"))
    else:
        (tmp_path / "v.json").write_text(damage, encoding="utf-8")
    with pytest.raises(VocoderLoadError, match=message):
        MelToWave.embedded(tmp_path / "v")


# --- local Vocos folders (issue 43, defect 3) ----------------------------------------------------------------------

@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_local_vocos_folder_loads_as_the_vocos_it_holds(tmp_path, weights) -> None:
    from leakloss.vocoder import load_vocos_folder
    from tests.tiny_models import write_vocos_folder

    vocos = write_vocos_folder(tmp_path / "voc", weights)
    loaded = load_vocos_folder(tmp_path / "voc")
    mel = torch.randn(1, 12, 100)
    torch.testing.assert_close(loaded(mel), MelToWave.from_vocos(vocos)(mel))
    assert not any(p.requires_grad for p in loaded.parameters())


#: config.yaml parts that name a callable other than Vocos' own classes: Vocos.from_hparams called any of them
HOSTILE = {
    "os.system": "feature_extractor:\n  class_path: os.system\n  init_args: {{command: 'touch {marker}'}}\n",
    "posix.system": "backbone:\n  class_path: posix.system\n  init_args: {{command: 'touch {marker}'}}\n",
    "subprocess.call": "head:\n  class_path: subprocess.call\n  init_args: {{args: [touch, '{marker}']}}\n",
    "builtins.eval": "backbone:\n  class_path: builtins.eval\n  init_args: {{source: \"open('{marker}', 'w')\"}}\n",
    "a python tag": "head: !!python/object/apply:os.system ['touch {marker}']\n",
    "another vocos class": "feature_extractor:\n  class_path: vocos.pretrained.Vocos\n",
    "a Vocos class by another path": "backbone:\n  class_path: vocos.pretrained.VocosBackbone\n  init_args: {{}}\n",
}


def hostile_vocos_folder(folder, variant: str, marker) -> None:
    """A tiny Vocos folder whose config.yaml has one part replaced by :data:`HOSTILE`'s ``variant``."""
    import yaml

    from tests.tiny_models import write_vocos_folder

    write_vocos_folder(folder)
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    hostile = HOSTILE[variant].format(marker=marker)
    part = hostile.split(":", 1)[0]
    kept = yaml.safe_dump({k: v for k, v in config.items() if k != part})
    (folder / "config.yaml").write_text(kept + hostile, encoding="utf-8")


@pytest.mark.parametrize("variant", list(HOSTILE))
def test_a_vocos_config_naming_any_other_callable_runs_nothing(tmp_path, variant) -> None:
    from leakloss.vocoder import VocoderLoadError, load_vocos_folder

    marker = tmp_path / "MARKER"
    hostile_vocos_folder(tmp_path / "voc", variant, marker)
    with pytest.raises(VocoderLoadError, match=r"config.yaml: "):
        load_vocos_folder(tmp_path / "voc")
    assert not marker.exists()


@pytest.mark.parametrize("change, message", [
    (("backbone", "dim", "8; rm -rf /"), r"backbone.init_args.dim must be a whole number >= 1, got '8; rm -rf /'"),
    (("backbone", "input_channels", 80), r"input_channels must be 100 \(vocos 24 kHz"),
    (("feature_extractor", "sample_rate", 22050), r"sample_rate must be 24000"),
    (("head", "hop_length", True), r"hop_length must be 256"),
    (("backbone", "adanorm_num_embeddings", 4), r"adanorm_num_embeddings must be null"),
    (("head", "bias", 1), r"head.init_args: 'bias' is not an argument of vocos.heads.ISTFTHead"),
    (("head", "dim", None), r"head.init_args lacks dim"),
    (("head", "padding", ["center"]), r"padding must be 'center' or 'same'"),
])
def test_a_vocos_config_with_bad_init_args_is_refused(tmp_path, change, message) -> None:
    import yaml

    from leakloss.vocoder import VocoderLoadError, load_vocos_folder
    from tests.tiny_models import write_vocos_folder

    write_vocos_folder(tmp_path / "voc")
    config = yaml.safe_load((tmp_path / "voc" / "config.yaml").read_text(encoding="utf-8"))
    part, name, value = change
    if value is None:
        del config[part]["init_args"][name]
    else:
        config[part]["init_args"][name] = value
    (tmp_path / "voc" / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(VocoderLoadError, match=message):
        load_vocos_folder(tmp_path / "voc")


def test_an_oversized_vocos_config_is_refused_unread(tmp_path) -> None:
    from leakloss.vocoder import VocoderLoadError, load_vocos_folder
    from tests.tiny_models import TINY_VOCOS_CONFIG, write_vocos_folder

    write_vocos_folder(tmp_path / "voc")
    (tmp_path / "voc" / "config.yaml").write_text(TINY_VOCOS_CONFIG + "# " + "x" * 70_000 + "\n", encoding="utf-8")
    with pytest.raises(VocoderLoadError, match="larger than 64 kB"):
        load_vocos_folder(tmp_path / "voc")


def test_a_vocos_config_of_nested_aliases_is_refused_at_once(tmp_path) -> None:
    # a few hundred bytes that load as 10**10 strings: an error message quoting it whole never finished
    import time

    from leakloss.vocoder import VocoderLoadError, load_vocos_folder
    from tests.tiny_models import TINY_VOCOS_CONFIG, write_vocos_folder

    write_vocos_folder(tmp_path / "voc")
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(9))
    config = TINY_VOCOS_CONFIG.replace("  init_args: {input_channels", "  init_args: {extra: *j, input_channels")
    (tmp_path / "voc" / "config.yaml").write_text(laughs + config, encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(VocoderLoadError, match=r"backbone.init_args: 'extra' is not an argument"):
        load_vocos_folder(tmp_path / "voc")
    (tmp_path / "voc" / "config.yaml").write_text(laughs + "feature_extractor: *j\n", encoding="utf-8")
    with pytest.raises(VocoderLoadError, match=r"feature_extractor must be a mapping with a class_path, got \[\["):
        load_vocos_folder(tmp_path / "voc")
    assert time.perf_counter() - start < 5
