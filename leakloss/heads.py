"""Tiny decision heads and their self-describing checkpoints.

- :class:`MLPHead`: 57 site features -> 16 -> 1 change logit (945 parameters), as the seed's
  deletion (recognizer B) and quality (recognizer A) heads. Feature standardisation is a buffer.
- :class:`RawConvHead`: reference-free, fully convolutional over conv-layer-4 features (5 ms frames):
  a leak logit per frame (the mean of a few independently initialised stacks), and a word/site score by
  soft-max pooling over the site's frames.

Checkpoints are ``NAME.safetensors`` (tensors only) + ``NAME.json`` (the card: dims, thresholds,
feature schema version, recognizer id, training-data hash, held-out table). :func:`load_head` needs
no Hydra and never unpickles anything.

Shapes: b batch, d features (57), c conv channels, g conv frames (5 ms).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from einops import rearrange
from torch import Tensor, nn

from leakloss.checks import check_whole, first_line, is_whole, nonfinite_tensors
from leakloss.functional.leak import pooled_site_logits
from leakloss.textfile import parse_json

FLAG_THRESHOLD = 0.5
NO_CHANGE_THRESHOLD = 0.2

_ASSETS = Path(__file__).resolve().parent / "assets"
#: The shipped heads: the scorer's deletion and quality heads and the penalty's raw-conv head, all on recognizer wb.
SHIPPED_HEADS = _ASSETS / "heads"
#: The scorer's heads on recognizer w (Whisper tiny.en), the default until 2026-12-05: the independent judge of a
#: signal that runs on wb (``benchmarks/direction.py``, ``benchmarks/finetune_effect.py``).
W_HEADS = _ASSETS / "heads_w"
#: The espeak-only heads on recognizers A/B (and A's raw-conv head).
ESPEAK_HEADS = _ASSETS / "heads_espeak"
#: The scorer's shipped head sets by the name of their recognizer: ``--heads w`` wherever the command runs (the
#: folder ``leakloss/assets/heads_w`` is found only from the repository's root, and not in an installed wheel).
SHIPPED_HEAD_SETS = {"wb": SHIPPED_HEADS, "w": W_HEADS, "espeak": ESPEAK_HEADS}


def heads_folder(value: str | os.PathLike | None) -> Path:
    """The folder of a head set: ``None`` the shipped one (on wb), a name of :data:`SHIPPED_HEAD_SETS` that is no
    folder here the shipped set of that name, anything else the folder given."""
    if value is None:
        return SHIPPED_HEADS
    path = Path(value)
    if str(value) in SHIPPED_HEAD_SETS and not path.exists():
        return SHIPPED_HEAD_SETS[str(value)]
    return path


class HeadLoadError(ValueError):
    """A head file that is missing, not safetensors, or whose card does not match its tensors."""


#: the heads a card may name: the scorer's two MLP heads and the penalty's raw-conv head
HEAD_NAMES = ("deletion", "quality", "rawconv")


@dataclass
class HeadCard:
    head: str  # deletion | quality | rawconv
    architecture: dict
    recognizer: str
    feature_schema_version: str
    feature_names: list[str] = field(default_factory=list)
    thresholds: dict = field(default_factory=lambda: {"flag": FLAG_THRESHOLD, "no_change": NO_CHANGE_THRESHOLD})
    training_data_sha256: str = ""
    heldout: list[dict] = field(default_factory=list)
    notes: str = ""
    #: what the training really ran (epochs, optimizer steps, fast_dev_run, the epoch kept): a 1-batch
    #: ``trainer=fast_dev_run`` head is told apart from a trained one; {} on cards written before it
    training: dict = field(default_factory=dict)
    #: a frame (raw-conv) head's input: ``{"source": "wav2vec2-conv" | "whisper-states", "layer": k, "hop_s": ...,
    #: "channels": c}`` (the recognizer's ``frame_features``); {} on cards written before it: A's conv layer 4
    features: dict = field(default_factory=dict)


def _spread(x: Tensor, floor: float) -> Tensor:
    """Per-column std of ``x [n, c]`` at least ``floor``; 1 where it is undefined (one row: NaN, which trained a
    NaN head that save_head then refused as diverged)."""
    return torch.nan_to_num(x.std(0), nan=1.0).clamp(min=floor)


class MLPHead(nn.Module):
    """``[b, d]`` features -> ``[b]`` change logits; inputs standardised with stored mean/std."""

    def __init__(self, in_features: int = 57, hidden: int = 16) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("hidden", hidden)):  # hidden=0: a constant head
            check_whole(value, name)
        self.in_features, self.hidden = in_features, hidden
        self.register_buffer("mean", torch.zeros(in_features))
        self.register_buffer("std", torch.ones(in_features))
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def architecture(self) -> dict:
        return {"class": "MLPHead", "in_features": self.in_features, "hidden": self.hidden}

    def fit_normalisation(self, x: Tensor) -> None:
        self.mean.copy_(x.mean(0))
        self.std.copy_(_spread(x, 1e-3))

    def forward(self, x: Tensor) -> Tensor:
        z = ((x - self.mean) / self.std).clamp(-8, 8)  # robust to out-of-range features
        return self.net(z).squeeze(-1)

    def score(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.forward(x).float())


class RawConvHead(nn.Module):
    """``[b, c, g]`` conv features -> ``[b, g]`` per-frame leak logits (5 ms frames).

    ``members`` independent conv stacks (trained on the same batches from different initialisations)
    whose frame logits are averaged: one stack's false flags on short retained vowels depend a lot on its
    initialisation, the average much less. :meth:`member_logits` gives each stack's logits for training.
    """

    def __init__(self, in_channels: int = 64, width: int = 48, kernel: int = 5, layers: int = 3,
                 members: int = 1) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("width", width), ("kernel", kernel), ("layers", layers),
                            ("members", members)):
            check_whole(value, name)
        self.in_channels, self.width, self.kernel, self.layers = in_channels, width, kernel, layers
        self.members = members
        self.register_buffer("mean", torch.zeros(in_channels))
        self.register_buffer("std", torch.ones(in_channels))
        self.nets = nn.ModuleList(self._stack() for _ in range(members))

    def _stack(self) -> nn.Sequential:
        blocks: list[nn.Module] = []
        ch = self.in_channels
        for i in range(self.layers):
            dilation = 2**i
            blocks += [nn.Conv1d(ch, self.width, self.kernel, padding=dilation * (self.kernel // 2), dilation=dilation),
                       nn.GELU()]
            ch = self.width
        blocks.append(nn.Conv1d(ch, 1, 1))
        return nn.Sequential(*blocks)

    @property
    def context_frames(self) -> int:
        """Frames each side that one output frame depends on (the dilated 'same'-padded convs)."""
        return sum(2**i * (self.kernel // 2) for i in range(self.layers))

    def architecture(self) -> dict:
        return {"class": "RawConvHead", "in_channels": self.in_channels, "width": self.width, "kernel": self.kernel,
                "layers": self.layers, "members": self.members}

    def fit_normalisation(self, feats: Tensor, mask: Tensor) -> None:
        """Per-channel mean/std over valid frames (``mask [b, g]``)."""
        x = rearrange(feats, "b c g -> b g c")[mask]  # [n, c]: the valid frames
        self.mean.copy_(x.mean(0))
        self.std.copy_(_spread(x, 1e-4))

    def member_logits(self, feats: Tensor) -> Tensor:
        """``[b, c, g]`` -> ``[m, b, g]``: each member's frame logits."""
        z = (feats - rearrange(self.mean, "c -> c 1")) / rearrange(self.std, "c -> c 1")
        return torch.stack([net(z).squeeze(1) for net in self.nets])

    def forward(self, feats: Tensor) -> Tensor:
        return self.member_logits(feats).mean(0)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # heads saved before ensembles had one stack under "net."; it is member 0 now
        for key in [k for k in state_dict if k.startswith(prefix + "net.")]:
            state_dict[prefix + "nets.0." + key[len(prefix + "net."):]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @staticmethod
    def pool(frame_logits: Tensor, mask: Tensor, temperature: float = 4.0) -> Tensor:
        """``frame_logits [b, g]``, ``mask [b, g]`` -> ``[b]`` site score logits: the soft maximum
        (temperature-scaled log-mean-exp) over each row's masked frames, as the penalty pools
        (:func:`leakloss.functional.leak.pooled_site_logits`). An empty mask gives a very negative logit
        (no evidence), never NaN.
        """
        rows = torch.arange(frame_logits.shape[0], device=frame_logits.device)
        return pooled_site_logits(frame_logits, mask, rows, temperature)


def _build(arch: dict) -> nn.Module:
    cls = arch.get("class")
    kwargs = {k: v for k, v in arch.items() if k != "class"}
    if cls == "MLPHead":
        return MLPHead(**kwargs)
    if cls == "RawConvHead":
        return RawConvHead(**kwargs)
    raise HeadLoadError(f"unknown head class {cls!r} in card")


def save_head(path: str | Path, head: nn.Module, card: HeadCard) -> Path:
    """Write ``path.safetensors`` and ``path.json``, each atomically (:mod:`leakloss.atomic`)."""
    from safetensors.torch import save

    from leakloss.atomic import write_bytes_atomic, write_text_atomic

    path = head_files_base(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    card.architecture = head.architecture()
    tensors = {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}
    bad = nonfinite_tensors(tensors)
    if bad:  # an outside_weight=nan run exported an all-NaN head as a success
        raise ValueError(f"{path}: weights {', '.join(bad[:3])} hold NaN/Inf: a diverged head is not saved")
    data = save(tensors, metadata={"leakloss_head": card.head})  # both encoded before either file is touched
    text = json.dumps(asdict(card), ensure_ascii=False, indent=1)
    weights, card_path = head_files(path)
    write_bytes_atomic(weights, data)
    write_text_atomic(card_path, text)
    return weights


def head_files_base(path: str | Path) -> Path:
    """``NAME``, ``NAME.safetensors`` or ``NAME.json`` -> ``NAME`` (a dotted name such as ``deletion.v2`` kept
    whole: ``with_suffix`` made it ``deletion``, another head's files)."""
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".safetensors", ".json") else path


def head_files(path: str | Path) -> tuple[Path, Path]:
    """A head's two files, ``NAME.safetensors`` and ``NAME.json``, for any of the names
    :func:`head_files_base` takes."""
    base = head_files_base(path)
    return base.with_name(base.name + ".safetensors"), base.with_name(base.name + ".json")


#: the card's thresholds that the scorer and the penalty read (``card.thresholds[...]``)
THRESHOLD_KEYS = ("flag", "no_change")


def _check_card_thresholds(thresholds: object, js: Path) -> None:
    """A card's ``thresholds`` must be an object with ``flag`` and ``no_change``, each a finite number in [0, 1],
    ``no_change <= flag`` (:func:`leakloss.decision.check_thresholds`); else :class:`HeadLoadError` naming the card.
    Checked at load time, so a bad card never gets as far as scoring."""
    from leakloss.decision import check_thresholds

    if not isinstance(thresholds, dict):
        raise HeadLoadError(f"{js}: the card's thresholds must be an object with "
                            f"{' and '.join(THRESHOLD_KEYS)}, got {thresholds!r}")
    missing = [k for k in THRESHOLD_KEYS if k not in thresholds]
    if missing:
        raise HeadLoadError(f"{js}: the card's thresholds lack {', '.join(repr(k) for k in missing)} "
                            f"(got {thresholds!r}; expected e.g. {{\"flag\": {FLAG_THRESHOLD}, "
                            f"\"no_change\": {NO_CHANGE_THRESHOLD}}})")
    flag, no_change = thresholds["flag"], thresholds["no_change"]
    if no_change is None:  # check_thresholds reads None as "not given"; in a card it is a missing value
        raise HeadLoadError(f"{js}: bad thresholds in the card: the no-change threshold must be a probability in "
                            "[0, 1], got None")
    try:
        check_thresholds(flag, no_change)
    except ValueError as err:
        raise HeadLoadError(f"{js}: bad thresholds in the card: {err}") from err


def load_head(path: str | Path) -> tuple[nn.Module, HeadCard]:
    """Load a head from ``NAME.safetensors`` (+ ``NAME.json``). Pickle files are refused.

    Raises:
        HeadLoadError: pickle or missing files, a card that is not valid JSON or whose thresholds are missing or
            not probabilities with ``no_change <= flag``, unreadable tensors, or tensors that do not fit the card.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if path.suffix in (".pt", ".pth", ".pkl", ".ckpt", ".bin"):
        raise HeadLoadError(
            f"{path}: refusing to load a pickle-based file ({path.suffix}); heads load from .safetensors only. "
            "Export a Lightning checkpoint with `leakloss train-heads` (it writes NAME.safetensors + NAME.json)."
        )
    st, js = head_files(path)
    if not st.exists() or not js.exists():
        raise HeadLoadError(f"head files not found: expected {st} and {js}")
    try:
        card_dict = parse_json(js.read_text(encoding="utf-8"))
        card = HeadCard(**card_dict)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, OSError) as err:  # OSError: a folder named .json
        raise HeadLoadError(f"{js}: not a valid head card ({err})") from err
    if "thresholds" not in card_dict:  # the dataclass' defaults were shown as the card's own
        raise HeadLoadError(f"{js}: the card has no thresholds (every exported head writes its own)")
    for name in ("head", "recognizer", "feature_schema_version", "training_data_sha256", "notes"):
        if not isinstance(getattr(card, name), str):  # "recognizer": 12 was an AttributeError in the scorer
            raise HeadLoadError(f"{js}: field {name!r} must be a string, got {getattr(card, name)!r:.60}")
    for name, kind in (("architecture", dict), ("feature_names", list), ("training", dict), ("features", dict)):
        if not isinstance(getattr(card, name), kind):
            raise HeadLoadError(f"{js}: field {name!r} must be a JSON {'object' if kind is dict else 'array'}, "
                                f"got {getattr(card, name)!r:.60}")
    if card.features and not (isinstance(card.features.get("source"), str)
                              and is_whole(card.features.get("layer"), 0)):  # the penalty loads by these two
        raise HeadLoadError(f"{js}: field 'features' must name the frames' 'source' (a string) and 'layer' (a "
                            f"whole number >= 0), got {card.features!r:.80}")
    if card.head not in HEAD_NAMES:
        raise HeadLoadError(f"{js}: head must be one of {', '.join(HEAD_NAMES)}, got {card.head!r}")
    if not card.recognizer.strip():
        raise HeadLoadError(f"{js}: field 'recognizer' is empty (the recognizer the head was trained on)")
    if card.head != "rawconv":  # the MLP heads read the site feature vector: its schema must be this code's
        from leakloss.acoustic.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION

        if card.feature_schema_version != FEATURE_SCHEMA_VERSION:
            raise HeadLoadError(f"{js}: trained on feature schema {card.feature_schema_version!r}, this code computes "
                                f"schema {FEATURE_SCHEMA_VERSION!r}: retrain the heads (leakloss train-heads)")
        if card.feature_names and list(card.feature_names) != list(FEATURE_NAMES):
            raise HeadLoadError(f"{js}: feature_names differ from this code's {len(FEATURE_NAMES)} site features")
    _check_card_thresholds(card.thresholds, js)
    card.heldout = _checked_heldout(card.heldout, js)
    try:
        tensors = load_file(str(st))
    except (SafetensorError, OSError) as err:
        raise HeadLoadError(f"{st}: not a readable safetensors file ({err})") from err
    not_float = sorted(k for k, v in tensors.items() if not v.is_floating_point())
    if not_float:  # load_state_dict casts int or bool tensors silently
        raise HeadLoadError(f"{st}: weights that are not floating point ({', '.join(not_float[:3])})")
    bad = nonfinite_tensors(tensors)
    if bad:
        raise HeadLoadError(f"{st}: weights {', '.join(bad[:3])} hold NaN/Inf (a diverged training)")
    try:  # the card's architecture builds the module: a wrong key, type or size is the card's fault
        with torch.device("meta"):  # shapes first, without memory: a damaged card's sizes allocated gigabytes
            shapes = {k: tuple(v.shape) for k, v in _build(card.architecture).state_dict().items()}
    except (TypeError, AttributeError, ValueError, KeyError, RuntimeError) as err:
        raise HeadLoadError(f"{js}: the card's architecture cannot be built ({type(err).__name__}: "
                            f"{first_line(err)})") from err
    wanted, held = sum(math.prod(v) for v in shapes.values()), sum(v.numel() for v in tensors.values())
    if wanted != held:  # (names may differ: heads saved before ensembles are renamed as they load)
        raise HeadLoadError(f"{st}: the card's architecture holds {wanted:,} weights, the file {held:,}")
    head = _build(card.architecture)
    try:
        head.load_state_dict(tensors, strict=True)
    except RuntimeError as err:
        raise HeadLoadError(f"{st}: tensors do not match the card's architecture ({first_line(err)})") from err
    not_positive = sorted(k for k, v in tensors.items() if k.rsplit(".", 1)[-1] == "std" and not bool((v > 0).all()))
    if not_positive:  # training floors the feature std at 1e-3: 0 or less is a damaged file (flipped, NaN inputs)
        raise HeadLoadError(f"{st}: normalisation {', '.join(not_positive)} must be above 0")
    _check_card_fits(card, head, st, js)
    return head.eval(), card


def _check_card_fits(card: HeadCard, head: nn.Module, st: Path, js: Path) -> None:
    """The card, its weights and its class tell one story: another head's weights beside a card (the file names
    swapped), a reference-free head's class under a site head's name (an AttributeError in the scorer), an MLP
    not sized for this code's site features, and a frame head whose card names other frames were all loaded."""
    from safetensors import safe_open

    from leakloss.acoustic.features import FEATURE_NAMES

    with safe_open(str(st), framework="pt") as f:
        written = (f.metadata() or {}).get("leakloss_head")
    if written is not None and written != card.head:
        raise HeadLoadError(f"{st}: these are the weights of head {written!r}, beside the card of head {card.head!r}")
    wanted = RawConvHead if card.head == "rawconv" else MLPHead
    if not isinstance(head, wanted):
        raise HeadLoadError(f"{js}: head {card.head!r} is a {wanted.__name__}, the card builds a "
                            f"{type(head).__name__}")
    if isinstance(head, MLPHead) and head.in_features != len(FEATURE_NAMES):
        raise HeadLoadError(f"{js}: in_features {head.in_features}, but this code computes {len(FEATURE_NAMES)} site "
                            "features")
    channels = card.features.get("channels") if card.features else None
    if isinstance(head, RawConvHead) and channels is not None and channels != head.in_channels:
        raise HeadLoadError(f"{js}: features.channels {channels!r} but the head reads {head.in_channels} channels")


def _checked_heldout(rows: object, where: Path) -> list[dict]:
    """The card's held-out rows, each validated (:func:`leakloss.schema.validate_heldout_row`; the old
    ``physical (<family>)`` form read into its fields), or :class:`HeadLoadError` naming the row."""
    from leakloss.schema import ResultError, validate_heldout_row

    if not isinstance(rows, list):
        raise HeadLoadError(f"{where}: 'heldout' must be a list of rows, got {type(rows).__name__}")
    try:
        return [dict(validate_heldout_row(r, f"{where}: heldout[{i}]")) for i, r in enumerate(rows)]
    except ResultError as err:
        raise HeadLoadError(str(err)) from err


def check_recognizer(card: HeadCard, recognizer_name: str) -> None:
    """Warn when a head was trained on other weights than the recognizer now loaded: ids carry a hash of the
    weights (``wb@427360c1``), which decides where both have one (a copy in another folder is the same weights);
    else the names do, a folder by its last part (a card that says ``wb`` under ``w@...``; ``b`` under
    ``/models/b@...`` is not warned)."""
    import warnings

    def parts(name: str) -> tuple[str, str]:  # the name (a folder's last part) and its weights hash ("" if none)
        base, at, digest = name.rpartition("@")
        return (Path(base).name, digest) if at else (Path(name).name, "")

    (card_base, card_hash), (base, loaded_hash) = parts(card.recognizer), parts(str(recognizer_name))
    if (card_hash != loaded_hash) if card_hash and loaded_hash else (card_base != base):
        warnings.warn(f"the {card.head} head was trained on recognizer {card.recognizer}, but {recognizer_name} is "
                      "loaded: retrain the heads (python -m train_heads) for these weights", stacklevel=2)


def n_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
