"""Frozen CTC phone recognizers behind one interface.

The same code loads the project's embedded recognizers (``"a"``, ``"b"``: small ``Wav2Vec2ForCTC``
models trained on the synthetic corpus, shipped as safetensors), a local directory saved with
``save_pretrained`` and a hub id such as ``facebook/wav2vec2-xlsr-53-espeak-cv-ft`` (read from the
local Hugging Face cache only: this library never downloads).

A recognizer folder holds ``config.json``, ``model.safetensors`` (or its sharded index) and
``vocab.json``. Weights load from safetensors only: pickle files (``pytorch_model.bin``, ``*.pt``...)
are refused, as for heads, and never opened. Every problem with a folder is a
:class:`RecognizerLoadError` naming the file; a name that is nowhere to be found is a
:class:`RecognizerNotFoundError` (a subclass).

Shapes: b batch, t samples (16 kHz), f frames of the recognizer (20 ms), v vocabulary,
c conv channels, g frames of a conv layer (layer 4 of the standard stack: 5 ms).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor, nn

from leakloss.constants import SAMPLE_RATE
from leakloss.functional.crop import conv_receptive_field
from leakloss.acoustic.recognizer_io import (  # noqa: F401 - the errors, greedy_phones, ... stay importable from here
    RecognizerInputError, RecognizerLoadError, RecognizerNotFoundError, _check_vocab_fits, _read_vocab,
    check_finite_waves, greedy_phones, read_word_check_limits,
)
from leakloss.text.phoneset import PhoneSet

EMBEDDED_DIR = Path(__file__).resolve().parent.parent / "assets" / "recognizers"
EMBEDDED = ("a", "b", "w", "wb")  # w, wb: CTC heads on the Whisper tiny.en / base encoders (acoustic.whisper_recognizer)
#: the frame features a wav2vec2 recognizer offers the leak penalty's frame head: a conv layer's output
WAV2VEC2_FRAME_SOURCE = "wav2vec2-conv"
#: the conv layer the raw-conv head reads by default (layer 4 of the standard stack: 5 ms frames)
DEFAULT_CONV_LAYER = 4


#: File endings of pickle-based checkpoints: loading one can run arbitrary code, so they are refused.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def split_recognizer_id(name: str) -> tuple[str, str]:
    """``"a@1f2e3d4c"`` -> ``("a", "1f2e3d4c")``: a name and the hash of the weights it asks for (8 hex digits
    after the last ``@``; ``""``: none). An existing folder is a name whatever it holds (``runs@v2``,
    ``user@host/rec``)."""
    import re

    base, at, digest = name.rpartition("@")
    if not at or not re.fullmatch(r"[0-9a-f]{8}", digest) or Path(name).expanduser().is_dir():
        return name, ""
    return base, digest


def resolve_recognizer_path(name: str) -> Path | str:
    """``"a"``/``"b"`` -> the embedded directory; a directory -> itself; otherwise a hub id."""
    base = split_recognizer_id(name)[0]  # "a@1f2e3d4c": an id with its weights' hash (see Recognizer.load)
    if base in EMBEDDED or base.startswith("embedded:"):
        key = base.split(":", 1)[-1]
        path = EMBEDDED_DIR / key
        if not ((path / "model.safetensors").exists() or (path / "head.safetensors").exists()):
            raise RecognizerNotFoundError(
                f"embedded recognizer {key!r} is not built: expected {path}/model.safetensors. "
                + ("Train it with `python -m train_recognizers.whisper`." if key == "w" else
                   "Train it with `python -m train_recognizers recognizer_arch=" + key + "`.")
            )
        return path
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if base != name and Path(base).expanduser().is_dir():  # "folder@1f2e3d4c": the id a head's card writes
        return Path(base).expanduser()
    if path.is_file():
        if path.suffix.lower() in PICKLE_SUFFIXES:
            raise RecognizerLoadError(
                f"{path}: refusing to load a pickle-based file ({path.suffix}); recognizers load from "
                "model.safetensors only. Pass the recognizer's folder (config.json, model.safetensors, vocab.json)."
            )
        raise RecognizerLoadError(f"{path} is a file; pass the recognizer's folder "
                                  "(config.json, model.safetensors, vocab.json)")
    return name


class Recognizer(nn.Module):
    """A frozen ``Wav2Vec2ForCTC`` phone recognizer: frame log-probabilities and conv features.

    Gradients flow to the input waveform (the training penalty needs them); no parameter ever
    receives one.
    """

    def __init__(self, model: nn.Module, vocab: dict[str, int], name: str, blank_token: str = "<pad>") -> None:
        super().__init__()
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.name = name
        #: calibrated ``(query, reference)`` phone-error limits of the word check from the card, or None
        self.word_check_limits: tuple[float, float] | None = None
        self.vocab = dict(vocab)
        self.phoneset = PhoneSet(self.vocab, blank_token)
        self.blank = self.phoneset.blank
        cfg = model.config
        self.conv_strides = tuple(cfg.conv_stride)
        self.conv_kernels = tuple(cfg.conv_kernel)
        self.samples_per_frame = int(torch.tensor(self.conv_strides).prod())
        self.frame_rate = SAMPLE_RATE / self.samples_per_frame

    def train(self, mode: bool = True) -> "Recognizer":  # frozen: always eval (no dropout, fixed stats)
        return super().train(False)

    @classmethod
    def load(cls, name: str = "a", *, device: str | torch.device = "cpu") -> "Recognizer":
        """Load by embedded name, local directory or hub id (local cache only).

        Raises:
            RecognizerNotFoundError: the name is not embedded, not a folder and not in the local hub cache.
            RecognizerLoadError: the folder holds pickle weights only, a file is missing or corrupt, or
                ``vocab.json`` does not match the model's outputs one to one (no blank token, an id beyond the
                outputs, or an output without a token).
        """
        if not str(name).strip():  # Path("") is the current folder: "error: .: no config.json" of an empty option
            raise RecognizerNotFoundError("the recognizer name is empty: give a, b, w, a folder or a hub id")
        source = resolve_recognizer_path(name)
        local = isinstance(source, Path)
        folder = source if local else _hub_snapshot(str(source))
        from leakloss.acoustic.whisper_recognizer import WhisperRecognizer, is_whisper_folder

        base, requested = split_recognizer_id(str(name))
        if base.startswith("embedded:"):  # "embedded:w" is w: its id must match the heads' cards ("w@...")
            base = base.split(":", 1)[1]
        if is_whisper_folder(folder):  # a CTC head on the Whisper encoder: same interface, its own loader
            return _as_requested(WhisperRecognizer.load(folder, name=base, device=device), requested, folder)
        weights = check_weights(folder)
        vocab = _read_vocab(folder)
        model = _load_model(folder)
        if local and weights.name == "model.safetensors":
            # the id carries a hash of the weights, so caches keyed by it never mix two trainings of "a"
            import hashlib

            digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:8]
            name = f"{base}@{digest}"
        try:
            recognizer = cls(model, vocab, name=str(name))
        except ValueError as err:  # e.g. no blank token in the vocabulary
            raise RecognizerLoadError(f"{folder / 'vocab.json'}: {err}") from err
        _check_vocab_fits(vocab, int(model.config.vocab_size), folder)  # after the blank check: a vocabulary without <pad> says so first
        recognizer.word_check_limits = read_word_check_limits(folder)  # calibrate writes them for any local folder
        return _as_requested(recognizer.to(device), requested, folder)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _prepare(self, waves: Tensor, lengths: Tensor | None,
                 normalize: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        if waves.dim() == 1:
            waves = waves.unsqueeze(0)
        b, t = waves.shape
        if lengths is None:
            lengths = torch.full((b,), t, dtype=torch.long, device=waves.device)
        mask = torch.arange(t, device=waves.device)[None, :] < lengths[:, None]
        x = waves.float()
        if normalize:  # per-utterance zero mean / unit variance, as the HF feature extractor does
            n = lengths.clamp(min=1).to(x.dtype)[:, None]
            mean = (x * mask).sum(-1, keepdim=True) / n
            var = (((x - mean) * mask) ** 2).sum(-1, keepdim=True) / n
            x = (x - mean) / torch.sqrt(var + 1e-7) * mask
        return x, mask, lengths

    def frame_lengths(self, lengths: Tensor | int, layer: int | None = None) -> Tensor | int:
        """Samples ``[b]`` (or an int) -> output frames ``[b]`` (an int) of the conv stack, to conv layer ``layer``
        (None: all)."""
        from leakloss.functional.crop import conv_output_frames

        stop = len(self.conv_kernels) if layer is None else layer + 1
        return conv_output_frames(lengths, self.conv_kernels[:stop], self.conv_strides[:stop])

    def forward(self, waves: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``waves [b, t]`` -> (``log_probs [b, f, v]`` fp32 log-softmax, ``frame_lengths [b]``).

        An item shorter than the conv stack's receptive field (400 samples) has 0 frames (the batch is zero-padded
        to one frame); NaN/Inf among an item's valid samples is a :class:`RecognizerInputError`."""
        if waves.dim() == 1:
            waves = waves.unsqueeze(0)
        b, t = waves.shape
        check_finite_waves(waves, lengths)
        need = conv_receptive_field(self.conv_kernels, self.conv_strides)
        if t < need:  # the stack's convs failed on fewer samples than one output frame reads
            lengths = lengths if lengths is not None else torch.full((b,), t, dtype=torch.long, device=waves.device)
            waves = nn.functional.pad(waves, (0, need - t))
        x, mask, lengths = self._prepare(waves, lengths)
        x = x.to(self.device)
        # the model's own frame count of a shorter item is negative (an IndexError): it hears at least one frame's
        # samples (zeros past its end), and its valid frames stay those of its own length (none)
        heard = torch.arange(x.shape[-1], device=x.device)[None, :] < lengths.clamp(min=need)[:, None].to(x.device)
        logits = self.model(x, attention_mask=heard.long().to(self.device)).logits
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        return log_probs, self.frame_lengths(lengths).to(log_probs.device)

    log_probs = forward

    def conv_hop_s(self, layer: int) -> float:
        """Seconds between frames of conv layer ``layer`` (0-based): the product of its stride and those below
        (5 ms for layer 4 of the standard wav2vec2 stack, 5*2*2*2*2 samples at 16 kHz)."""
        if not 0 <= layer < len(self.conv_strides):
            raise ValueError(f"conv layer {layer} out of range 0..{len(self.conv_strides) - 1}")
        return math.prod(self.conv_strides[: layer + 1]) / SAMPLE_RATE

    def conv_features(self, waves: Tensor, layer: int = 4, lengths: Tensor | None = None,
                      normalize: bool = True) -> tuple[Tensor, Tensor]:
        """Output of conv layer ``layer`` (0-based): ``[b, c, g]`` and valid frame counts ``[b]``; the frames are
        :meth:`conv_hop_s` apart. ``normalize=False``: the caller has normalised ``waves`` (the leak penalty)."""
        x, _, lengths = self._prepare(waves, lengths, normalize)
        hidden = x.to(self.device)[:, None]
        conv_layers = self.model.wav2vec2.feature_extractor.conv_layers
        if not 0 <= layer < len(conv_layers):
            raise ValueError(f"conv layer {layer} out of range 0..{len(conv_layers) - 1}")
        for conv in conv_layers[: layer + 1]:
            hidden = conv(hidden)
        return hidden.float(), self.frame_lengths(lengths, layer)

    # The frame-feature interface the leak penalty reads (shared with WhisperRecognizer): ``layer`` None is
    # :attr:`default_frame_layer`. Here the frames are a conv layer's output, each depending on a fixed stretch of
    # input (the stack's receptive field).
    frame_source = WAV2VEC2_FRAME_SOURCE
    default_frame_layer = DEFAULT_CONV_LAYER

    def _frame_layer(self, layer: int | None) -> int:
        layer = self.default_frame_layer if layer is None else layer
        if not 0 <= layer < len(self.conv_strides):  # conv_dim[-1] was a silent "last layer"
            raise ValueError(f"conv layer {layer} out of range 0..{len(self.conv_strides) - 1}")
        return layer

    def frame_features(self, waves: Tensor, lengths: Tensor | None = None, layer: int | None = None,
                       normalize: bool = True) -> tuple[Tensor, Tensor]:
        """``waves [b, t]`` -> (frame features ``[b, c, g]`` fp32, valid frames ``[b]``), :meth:`frame_hop_s` apart.
        ``normalize=False``: the caller has centred each item and scaled it to unit RMS (the leak penalty)."""
        return self.conv_features(waves, self._frame_layer(layer), lengths, normalize)

    def frame_hop_s(self, layer: int | None = None) -> float:
        return self.conv_hop_s(self._frame_layer(layer))

    def frame_count(self, samples: Tensor | int, layer: int | None = None) -> Tensor | int:
        """Frames of ``samples`` input samples (0 below :meth:`frame_min_samples`)."""
        return self.frame_lengths(samples, self._frame_layer(layer))

    def frame_min_samples(self, layer: int | None = None) -> int:
        """Fewest input samples that make one frame (the conv stack's receptive field)."""
        from leakloss.functional.crop import conv_receptive_field

        stop = self._frame_layer(layer) + 1
        return conv_receptive_field(self.conv_kernels[:stop], self.conv_strides[:stop])

    def frame_context_s(self, layer: int | None = None) -> float:
        """Seconds of input one frame depends on (its receptive field): what a crop must keep around a window."""
        return self.frame_min_samples(layer) / SAMPLE_RATE

    def frame_channels(self, layer: int | None = None) -> int:
        return int(self.model.config.conv_dim[self._frame_layer(layer)])

    @torch.no_grad()
    def greedy(self, waves: Tensor, lengths: Tensor | None = None) -> list[list[str]]:
        """Greedy CTC decoding to phone strings (blanks and repeats collapsed)."""
        return greedy_phones(*self.forward(waves, lengths), self.phoneset)


def _hub_snapshot(name: str) -> Path:
    """The local cache folder of hub id ``name`` (never downloads)."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except (OSError, ValueError) as err:  # not cached (LocalEntryNotFoundError), or not a valid hub id
        raise RecognizerNotFoundError(
            f"cannot load recognizer {name!r}: it is not an embedded name ({', '.join(EMBEDDED)}), "
            "not a local directory, and not in the local Hugging Face cache (leakloss never downloads). "
            f"Download it elsewhere (e.g. `huggingface-cli download {name}`) and pass the directory, "
            "or copy it into the HF cache."
        ) from err


def _as_requested(recognizer: nn.Module, requested: str, folder: Path) -> nn.Module:
    """``recognizer``, unless the name asked for other weights (``a@deadbeef``: the id heads' cards write):
    :class:`RecognizerLoadError` naming both (the weights' hash is the id's part after ``@``)."""
    loaded = split_recognizer_id(str(recognizer.name))[1]
    if requested and loaded and requested != loaded:
        raise RecognizerLoadError(f"{folder}: asked for weights {requested}, the folder holds {loaded} "
                                  f"({recognizer.name}); give the name without @... to take these")
    return recognizer


#: safetensors dtypes a recognizer's weights may have (an int or bool tensor was cast into the model silently)
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


def check_weights(folder: Path) -> Path:
    """The safetensors weights of ``folder`` (``model.safetensors`` or the sharded index), checked readable.

    Raises:
        RecognizerLoadError: no config.json or not a JSON object; pickle weights only; no weights; a corrupt safetensors file.
    """
    from safetensors import SafetensorError, safe_open

    if not (folder / "config.json").is_file():
        raise RecognizerLoadError(f"{folder}: no config.json; a recognizer folder holds config.json, "
                                  "model.safetensors and vocab.json (as written by save_pretrained)")
    try:  # a list or a string here was taken for "not a Whisper folder" and reported as missing weights
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecognizerLoadError(f"{folder / 'config.json'}: not valid JSON ({err})") from err
    if not isinstance(config, dict):
        raise RecognizerLoadError(f"{folder / 'config.json'}: a JSON {type(config).__name__}, not an object of "
                                  "the recognizer's settings")
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        shards, weights = [single], single
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            shards, weights = sorted({folder / f for f in weight_map.values()}), index
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise RecognizerLoadError(f"{index}: not a valid safetensors index ({err})") from err
    else:
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
        if pickles:
            raise RecognizerLoadError(
                f"{folder}: refusing to load pickle-based weights ({', '.join(pickles)}); recognizers load from "
                "model.safetensors only (a pickle can run code when loaded). Convert it where you trust the file: "
                "`Wav2Vec2ForCTC.from_pretrained(folder).save_pretrained(folder)` writes model.safetensors."
            )
        raise RecognizerLoadError(f"{folder}: no model.safetensors (the recognizer's weights)")
    for shard in shards:
        try:
            with safe_open(str(shard), framework="pt") as fh:  # reads and checks the header against the size
                not_float = sorted(k for k in fh.keys() if fh.get_slice(k).get_dtype() not in FLOAT_DTYPES)
        except (SafetensorError, OSError) as err:
            raise RecognizerLoadError(f"{shard}: not a readable safetensors file ({err})") from err
        if not_float:
            raise RecognizerLoadError(f"{shard}: weights that are not floating point ({', '.join(not_float[:3])})")
    return weights


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """No "Loading weights" progress bar from transformers; the caller's setting is restored after."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    was_enabled, hub_was_disabled = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()  # also silences huggingface_hub's bars
    hf_logging.set_verbosity_error()  # its load report table: what it says, the checks after loading raise
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if was_enabled:
            hf_logging.enable_progress_bar()
        if hub_was_disabled:
            hub_utils.disable_progress_bars()


def _load_model(folder: Path) -> nn.Module:
    from transformers import Wav2Vec2ForCTC

    from leakloss.checks import first_line, nonfinite_tensors

    try:
        with quiet_loading():
            # use_safetensors: transformers must never fall back to a pickle beside the safetensors
            # dtype float32: a config that says float16 was applied, and fp32 audio then failed in the first conv
            model, info = Wav2Vec2ForCTC.from_pretrained(folder, local_files_only=True, use_safetensors=True,
                                                         output_loading_info=True, dtype=torch.float32)
    except Exception as err:  # transformers raises many types (OSError, ValueError, RuntimeError...)
        raise RecognizerLoadError(f"{folder}: the recognizer could not be loaded "
                                  f"({type(err).__name__}: {first_line(err)})") from err
    # a file of another model (a head's tensors) loaded as "OK" with every weight freshly initialised
    missing = [k for k in info.get("missing_keys", []) if not k.endswith(_BENIGN_MISSING)]
    if missing:
        raise RecognizerLoadError(f"{folder}: model.safetensors lacks {len(missing)} of the model's weights "
                                  f"(e.g. {', '.join(missing[:3])}): not this recognizer's weights")
    # weights the config has no place for (a config cut to fewer layers) were dropped, and the model ran as another
    unexpected = [k for k in info.get("unexpected_keys", []) if not k.startswith(_BENIGN_UNEXPECTED)]
    if unexpected:
        raise RecognizerLoadError(f"{folder}: model.safetensors holds {len(unexpected)} weights config.json has no "
                                  f"place for (e.g. {', '.join(sorted(unexpected)[:3])}): config and weights differ")
    bad = nonfinite_tensors(model.state_dict())
    if bad:
        raise RecognizerLoadError(f"{folder}: weights {', '.join(bad[:3])} hold NaN/Inf (a diverged training)")
    return model


#: weights a released wav2vec2 CTC checkpoint may leave out (used for pre-training masking only)
_BENIGN_MISSING = ("masked_spec_embed",)
#: weights a released checkpoint may hold beyond a CTC model (its pre-training quantizer and projections)
_BENIGN_UNEXPECTED = ("quantizer.", "project_hid.", "project_q.", "wav2vec2.quantizer.")
