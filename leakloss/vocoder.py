"""Differentiable mel -> 16 kHz wave: a frozen Vocos (backbone + head) followed by a 24k -> 16k resampler.

F5-TTS / IndicF5 work on vocos-style log mels (24 kHz, hop 256, 100 bins, ``[b, n, d]``); the leak
recognizers listen at 16 kHz. ``Vocos.decode`` runs under ``torch.inference_mode`` and so cuts the
graph; this module calls ``head(backbone(mel))`` directly so gradients reach the mel.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
import torchaudio.functional as AF
from torch import nn

from leakloss.checks import check_whole, first_line, is_finite_number, is_whole, load_finite_safetensors
from leakloss.constants import MEL_BINS, MEL_DESCRIPTION, MEL_FLOOR, MEL_HOP, MEL_N_FFT, MEL_SAMPLE_RATE, SAMPLE_RATE

EMBEDDED_VOCODER = Path(__file__).resolve().parent / "assets" / "vocoder" / "tiny"


def log_mel(wave: torch.Tensor) -> torch.Tensor:
    """``[b, t]`` 24 kHz wave -> ``[b, n, 100]`` vocos-style log mel (n_fft 1024, hop 256, centred, power 1,
    ``log(clamp(x, MEL_FLOOR))``), the mels F5-TTS and the released Vocos use. fp32 inside."""
    import torchaudio

    spec = torchaudio.functional.spectrogram(
        wave.float(), pad=0, window=torch.hann_window(MEL_N_FFT, device=wave.device), n_fft=MEL_N_FFT,
        hop_length=MEL_HOP, win_length=MEL_N_FFT, power=1.0, normalized=False, center=True, pad_mode="reflect")
    fb = torchaudio.functional.melscale_fbanks(MEL_N_FFT // 2 + 1, 0.0, MEL_SAMPLE_RATE / 2, MEL_BINS, MEL_SAMPLE_RATE,
                                               norm=None, mel_scale="htk").to(spec.device)
    mel = torch.matmul(spec.transpose(-1, -2), fb)  # [b, n, 100]
    return mel.clamp(min=MEL_FLOOR).log()


#: Silent mel frames appended past every item before vocoding a batch (and written over its padding): more than
#: the released 24 kHz Vocos reaches (embedding conv and 8 ConvNeXt blocks, kernel 7: 27 frames, plus the ISTFT's
#: 4-frame window), so an item's samples do not depend on the batch it is vocoded in.
VOCODER_TAIL_FRAMES = 32


def silence_past_lengths(mels: torch.Tensor, mel_lengths: torch.Tensor,
                         tail_frames: int = VOCODER_TAIL_FRAMES) -> torch.Tensor:
    """``mels [b, n, d]`` -> ``[b, n + tail_frames, d]``: frames at and past ``mel_lengths [b]`` set to a silent
    frame (``log(MEL_FLOOR)``, no gradient to them) and ``tail_frames`` more appended.

    Vocode this, not the padded batch: what a batch pads with (zeros, a model's ``x1_hat``) then never reaches
    an item's samples, and an item vocodes as it does alone."""
    mels = torch.nn.functional.pad(mels, (0, 0, 0, tail_frames))
    valid = torch.arange(mels.shape[1], device=mels.device)[None, :] < mel_lengths.to(mels.device)[:, None]
    silent = torch.full((), math.log(MEL_FLOOR), dtype=mels.dtype, device=mels.device)
    return torch.where(valid[..., None], mels, silent)


def mel_lengths_to_samples(
    n_frames: torch.Tensor | int,
    hop_length: int = MEL_HOP,
    sample_rate_in: int = MEL_SAMPLE_RATE,
    sample_rate_out: int = SAMPLE_RATE,
) -> torch.Tensor | int:
    """Valid output samples (16 kHz) for ``n_frames`` mel frames, int or ``[b]`` long tensor.

    Vocos' ISTFT head ("same" padding, as the released 24 kHz mel model) gives ``n * hop`` samples at
    24 kHz; ``torchaudio.functional.resample`` then returns ``ceil(len * out / in)`` samples.
    """
    samples_in = n_frames * hop_length
    return -((-samples_in * sample_rate_out) // sample_rate_in)  # integer ceil, works on ints and tensors


class MelToWave(nn.Module):
    """Frozen Vocos generator: ``[b, n, 100]`` log mel (24 kHz, hop 256) -> ``[b, t]`` wave at 16 kHz.

    Parameters never train (``requires_grad`` False, always eval); gradients flow through to the mel.
    Padded frames vocode to garbage; mask the output with :func:`mel_lengths_to_samples`.
    """

    def __init__(
        self,
        backbone: nn.Module,
        head: nn.Module,
        sample_rate_in: int = MEL_SAMPLE_RATE,
        sample_rate_out: int = SAMPLE_RATE,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.sample_rate_in = sample_rate_in
        self.sample_rate_out = sample_rate_out
        self.requires_grad_(False)
        self.eval()

    frozen = True

    def train(self, mode: bool = True) -> "MelToWave":
        # a parent's .train() must not flip the frozen vocoder into training behaviour
        return super().train(mode and not self.frozen)

    @classmethod
    def from_vocos(cls, vocos: nn.Module, sample_rate_out: int = SAMPLE_RATE) -> "MelToWave":
        """Wrap a loaded ``vocos.Vocos`` (its feature extractor is dropped: mels come from the TTS)."""
        return cls(vocos.backbone, vocos.head, MEL_SAMPLE_RATE, sample_rate_out)

    @classmethod
    def tiny(cls, seed: int = 0, dim: int = 32, num_layers: int = 1, intermediate_dim: int | None = None,
             frozen: bool = True) -> "MelToWave":
        """Randomly initialised small Vocos with the released model's I/O (100 mels, n_fft 1024, hop 256).

        Offline and fast: for tests and plumbing only; it does not produce speech (:meth:`embedded` does).
        ``frozen=False`` leaves it trainable (``train_vocoder`` fits it).
        """
        from vocos.heads import ISTFTHead
        from vocos.models import VocosBackbone

        for name, value in (("dim", dim), ("num_layers", num_layers), ("intermediate_dim", intermediate_dim)):
            if value is not None or name != "intermediate_dim":
                check_whole(value, name)
        with torch.random.fork_rng():  # seed locally, leave the global RNG stream untouched
            torch.manual_seed(seed)
            backbone = VocosBackbone(input_channels=MEL_BINS, dim=dim, intermediate_dim=intermediate_dim or 2 * dim,
                                     num_layers=num_layers)
            head = ISTFTHead(dim=dim, n_fft=MEL_N_FFT, hop_length=MEL_HOP, padding="same")
        model = cls(backbone, head)
        if not frozen:
            model.requires_grad_(True)
            model.frozen = False
        return model

    @classmethod
    def embedded(cls, path: str | os.PathLike | None = None) -> "MelToWave":
        """The project's own tiny Vocos, fitted offline to espeak readings (``python -m train_vocoder``).

        It sounds buzzy but the recognizers read it: its card records recognizer A's phone error rate on
        vocoded held-out readings. Loads safetensors + a JSON card, never a pickle.
        """
        from vocos.heads import ISTFTHead
        from vocos.models import VocosBackbone

        path = Path(path or EMBEDDED_VOCODER)
        card_path, weights = path.with_suffix(".json"), path.with_suffix(".safetensors")
        if not card_path.exists() or not weights.exists():
            raise FileNotFoundError(f"no vocoder at {path} (.json + .safetensors); train one: python -m train_vocoder")
        card = _read_vocoder_card(card_path)
        backbone = VocosBackbone(input_channels=card["n_mels"], dim=card["dim"],
                                 intermediate_dim=card["intermediate_dim"], num_layers=card["num_layers"])
        head = ISTFTHead(dim=card["dim"], n_fft=card["n_fft"], hop_length=card["hop_length"], padding="same")
        model = cls(backbone, head)
        state = load_finite_safetensors(weights, VocoderLoadError)
        try:
            model.load_state_dict(state)
        except RuntimeError as err:  # missing, unexpected or mis-shaped weights for the card's sizes
            raise VocoderLoadError(f"{weights}: the weights do not fit the card's sizes ({first_line(err)})") from None
        model.card = card
        return model

    def generate(self, mels: torch.Tensor) -> torch.Tensor:
        """``mels`` ``[b, n, 100]`` -> wave ``[b, n * 256]`` at 24 kHz (no resampling)."""
        return self.head(self.backbone(mels.transpose(1, 2)))

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """``mels`` ``[b, n, 100]`` -> wave ``[b, mel_lengths_to_samples(n)]`` at ``sample_rate_out``."""
        wave_24k = self.generate(mels)
        if self.sample_rate_out == self.sample_rate_in:
            return wave_24k
        return AF.resample(wave_24k, self.sample_rate_in, self.sample_rate_out)


class VocoderLoadError(ValueError):
    """A vocoder file pair that cannot be loaded: an unreadable or incomplete card, sizes the mel front end
    does not use, or weights that are damaged or do not fit the card."""


def _read_vocoder_card(path: Path) -> dict:
    """The card of a saved vocoder, checked: its sizes build the model and its mel settings are this code's."""
    from leakloss.textfile import read_json_object

    try:
        card = read_json_object(path, "vocoder card")
    except ValueError as err:
        raise VocoderLoadError(str(err)) from None
    for key in ("dim", "intermediate_dim", "num_layers", "n_mels", "n_fft", "hop_length"):
        value = card.get(key)
        if not is_whole(value, 1):
            raise VocoderLoadError(f"{path}: {key} must be a whole number >= 1, got {value!r}")
    # the mel front end (leakloss.constants) is fixed: weights fitted to other mels would vocode garbage
    for key, want in (("n_mels", MEL_BINS), ("n_fft", MEL_N_FFT), ("hop_length", MEL_HOP),
                      ("sample_rate", MEL_SAMPLE_RATE)):
        if card.get(key, want) != want:
            raise VocoderLoadError(f"{path}: {key} is {card[key]!r}, but the mel front end uses {want} ({MEL_DESCRIPTION})")
    return card


#: The most bytes of a Vocos folder's ``config.yaml`` read (the released one is 0.5 kB): a larger file is no Vocos
#: config, and is not parsed.
VOCOS_CONFIG_BYTES = 64 * 1024


def _vocos_classes() -> dict[str, dict[str, tuple[type, dict, tuple[str, ...]]]]:
    """The only classes a Vocos folder's ``config.yaml`` may name, per part: ``{part: {class_path: (class, {init
    arg: rule}, required args)}}``. A rule is a check ``value -> bool`` with what it wants, in words. The sizes of
    the mel front end are fixed (:data:`leakloss.constants`): weights fitted to other mels would vocode garbage."""
    from vocos.feature_extractors import MelSpectrogramFeatures
    from vocos.heads import ISTFTHead
    from vocos.models import VocosBackbone, VocosResNetBackbone

    def fixed(want: int):
        return (lambda v: is_whole(v) and v == want), f"{want} ({MEL_DESCRIPTION})"

    size = (lambda v: is_whole(v, 1)), "a whole number >= 1"
    padding = (lambda v: v in ("center", "same")), "'center' or 'same'"
    scale = (lambda v: v is None or (is_finite_number(v) and v > 0)), "null or a finite number > 0"
    return {
        "feature_extractor": {"vocos.feature_extractors.MelSpectrogramFeatures": (MelSpectrogramFeatures, {
            "sample_rate": fixed(MEL_SAMPLE_RATE), "n_fft": fixed(MEL_N_FFT), "hop_length": fixed(MEL_HOP),
            "n_mels": fixed(MEL_BINS), "padding": padding}, ())},
        "backbone": {
            "vocos.models.VocosBackbone": (VocosBackbone, {
                "input_channels": fixed(MEL_BINS), "dim": size, "intermediate_dim": size, "num_layers": size,
                "layer_scale_init_value": scale,
                # an AdaLayerNorm backbone needs a bandwidth id per call, which mels from a TTS do not have
                "adanorm_num_embeddings": ((lambda v: v is None), "null (the mel model has no bandwidth ids)")},
                ("input_channels", "dim", "intermediate_dim", "num_layers")),
            "vocos.models.VocosResNetBackbone": (VocosResNetBackbone, {
                "input_channels": fixed(MEL_BINS), "dim": size, "num_blocks": size, "layer_scale_init_value": scale},
                ("input_channels", "dim", "num_blocks"))},
        "head": {"vocos.heads.ISTFTHead": (ISTFTHead, {
            "dim": size, "n_fft": fixed(MEL_N_FFT), "hop_length": fixed(MEL_HOP), "padding": padding},
            ("dim", "n_fft", "hop_length"))},
    }


def read_vocos_config(path: str | os.PathLike) -> dict[str, tuple[type, dict]]:
    """A Vocos folder's ``config.yaml`` (``{part: {class_path, init_args}}``, as ``charactr/vocos-mel-24khz``'s)
    read as data: ``{part: (class, init args)}`` for the feature extractor, backbone and head.

    ``Vocos.from_hparams`` imports and calls whatever ``class_path`` names (``os.system`` with ``init_args:
    {command: ...}`` ran the command); here only the classes of :func:`_vocos_classes` are accepted, each with
    its own init args, each checked, and nothing is imported by name.

    Raises:
        VocoderLoadError: an unreadable or oversized file, not a YAML mapping, a missing part, any other class,
            an unknown, missing or bad init arg.
    """
    import yaml

    from leakloss.checks import echoed

    path = Path(path)
    try:
        with path.open("rb") as fh:
            data = fh.read(VOCOS_CONFIG_BYTES + 1)
    except OSError as err:
        raise VocoderLoadError(f"{path}: cannot be read ({err.strerror or err})") from None
    if len(data) > VOCOS_CONFIG_BYTES:
        raise VocoderLoadError(f"{path}: larger than {VOCOS_CONFIG_BYTES // 1024} kB: not a Vocos config")
    try:
        config = yaml.safe_load(data.decode("utf-8"))  # data only: no tag builds an object
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise VocoderLoadError(f"{path}: not UTF-8 YAML ({first_line(err)})") from None
    if not isinstance(config, dict):
        raise VocoderLoadError(f"{path}: not a YAML mapping of feature_extractor, backbone and head")
    parts = {}
    for part, allowed in _vocos_classes().items():
        node = config.get(part)
        if not isinstance(node, dict) or not isinstance(node.get("class_path"), str):
            raise VocoderLoadError(f"{path}: {part} must be a mapping with a class_path, got {echoed(node)}")
        unknown = sorted(set(node) - {"class_path", "init_args"}, key=str)
        if unknown:
            raise VocoderLoadError(f"{path}: {part} has keys other than class_path and init_args: {echoed(unknown)}")
        if node["class_path"] not in allowed:
            raise VocoderLoadError(f"{path}: {part}.class_path {echoed(node['class_path'])} is not one of the Vocos "
                                   f"classes leakloss builds ({', '.join(allowed)})")
        cls, rules, required = allowed[node["class_path"]]
        args = node.get("init_args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise VocoderLoadError(f"{path}: {part}.init_args must be a mapping, got {echoed(args)}")
        for name, value in args.items():
            if name not in rules:
                raise VocoderLoadError(f"{path}: {part}.init_args: {echoed(name)} is not an argument of "
                                       f"{node['class_path']} leakloss sets ({', '.join(rules)})")
            check, want = rules[name]
            if not check(value):
                raise VocoderLoadError(f"{path}: {part}.init_args.{name} must be {want}, got {echoed(value)}")
        missing = [name for name in required if name not in args]
        if missing:
            raise VocoderLoadError(f"{path}: {part}.init_args lacks {', '.join(missing)}")
        parts[part] = (cls, dict(args))
    return parts


def load_vocos_folder(folder: str | os.PathLike) -> MelToWave:
    """A local Vocos folder (``config.yaml`` + ``model.safetensors`` or ``pytorch_model.bin``, e.g.
    ``charactr/vocos-mel-24khz``) -> a frozen :class:`MelToWave`. The config is read as data
    (:func:`read_vocos_config`) and the model built from Vocos' own classes; ``pytorch_model.bin`` is read as
    plain tensors (``torch.load(weights_only=True)``).

    Raises:
        VocoderLoadError: no config or weights, a config :func:`read_vocos_config` refuses, weights that cannot
            be read, hold NaN/Inf or do not fit the config's sizes.
    """
    import pickle

    from vocos import Vocos

    folder = Path(folder)
    if not (folder / "config.yaml").is_file():
        raise VocoderLoadError(f"{folder}: no config.yaml (a Vocos folder holds config.yaml and its weights)")
    safetensors, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if not safetensors.is_file() and not pickled.is_file():
        raise VocoderLoadError(f"{folder} has no model.safetensors or pytorch_model.bin")
    parts = read_vocos_config(folder / "config.yaml")
    try:
        with torch.random.fork_rng():  # the weights replace the initialisation: leave the global RNG stream alone
            vocos = Vocos(**{part: cls(**args) for part, (cls, args) in parts.items()})
    except (ValueError, RuntimeError) as err:  # e.g. sizes too large to allocate
        raise VocoderLoadError(f"{folder / 'config.yaml'}: the model cannot be built ({type(err).__name__}: "
                               f"{first_line(err)})") from None
    try:
        if safetensors.is_file():
            from safetensors.torch import load_file

            state = load_file(str(safetensors))
        else:
            state = torch.load(pickled, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - SafetensorError, UnpicklingError, EOFError, OSError: each its own kind
        name = "UnpicklingError" if isinstance(err, pickle.UnpicklingError) else type(err).__name__
        raise VocoderLoadError(f"{folder}: weights not readable ({name}: {first_line(err) or 'no message'})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise VocoderLoadError(f"{folder}: the weights are not a dict of named tensors")
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise VocoderLoadError(f"{folder}: weights hold NaN/Inf ({', '.join(map(str, bad[:3]))})")
    try:
        vocos.load_state_dict(state)
    except RuntimeError as err:  # missing, unexpected or mis-shaped weights for the config's sizes
        raise VocoderLoadError(f"{folder}: the weights do not fit config.yaml's sizes (RuntimeError: "
                               f"{first_line(err)})") from None
    return MelToWave.from_vocos(vocos.eval())


def vocoder_sizes(vocoder: MelToWave) -> dict[str, int]:
    """The sizes :meth:`MelToWave.embedded` rebuilds a saved vocoder from, read off the built model (a config's
    ``intermediate_dim: null`` is the model's ``2 * dim``: the card must say the number)."""
    backbone = vocoder.backbone
    return {"dim": int(backbone.embed.out_channels),
            "intermediate_dim": int(backbone.convnext[0].pwconv1.out_features),
            "num_layers": len(backbone.convnext)}


def save_vocoder(path: str | os.PathLike, vocoder: MelToWave, card: dict) -> None:
    """``path.safetensors`` + ``path.json``, written as one unit (both or neither)."""
    from safetensors.torch import save

    from leakloss.atomic import write_files_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_files_atomic({
        path.with_suffix(".safetensors"): save({k: v.detach().contiguous() for k, v in vocoder.state_dict().items()}),
        path.with_suffix(".json"): json.dumps(card, indent=1, ensure_ascii=False).encode("utf-8"),
    })
