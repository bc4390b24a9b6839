"""The recognizer trainer's module: masked normalisation, the LR schedule, a CTC step that learns, and a saved
recognizer that the library loads."""

import math

import lightning as L
import pytest
import torch

from leakloss.acoustic.recognizer import Recognizer
from leakloss.acoustic.recognizer_training import (
    BLANK, RecognizerArchitecture, RecognizerModule, build_vocab, collate_ctc, save_recognizer,
)

TINY = RecognizerArchitecture(conv_channels=8, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                              pos_conv_kernel=4, pos_conv_groups=2)


@pytest.fixture()
def module():
    return RecognizerModule(TINY, build_vocab([["n", "e", "k", "ʌ", "p", "aː"]]), seed=0, lr=3e-3, warmup_steps=2,
                            total_steps=20)


def test_normalisation_uses_valid_samples_only_and_zeroes_padding(module):
    g = torch.Generator().manual_seed(0)
    a, b = 3 + 2 * torch.randn(800, generator=g), torch.randn(500, generator=g) * 0.1
    batch = collate_ctc([(a, torch.tensor([1, 2])), (b, torch.tensor([3]))])
    x, mask = module._normalize(batch["waves"], batch["wave_lengths"])
    for i, n in enumerate((800, 500)):
        valid = x[i, :n].double()
        assert abs(float(valid.mean())) < 1e-5 and float(valid.std(unbiased=False)) == pytest.approx(1.0, abs=1e-4)
        assert bool((x[i, n:] == 0).all()) and int(mask[i].sum()) == n
    alone, _ = module._normalize(b[None], torch.tensor([500]))
    torch.testing.assert_close(x[1, :500], alone[0])  # batch consistency: padding never leaks into an item


def test_lr_warms_up_then_anneals_to_five_percent(module):
    opt = module.configure_optimizers()
    sched = opt["lr_scheduler"]["scheduler"]
    factors = [sched.lr_lambdas[0](s) for s in range(0, 25)]
    assert factors[0] == pytest.approx(0.5) and factors[1] == pytest.approx(1.0)
    assert all(x >= y for x, y in zip(factors[2:], factors[3:]))  # monotone decay after warm-up
    assert factors[20] == pytest.approx(0.05) and factors[24] == pytest.approx(0.05)
    mid = 2 + (20 - 2) // 2
    assert factors[mid] == pytest.approx(0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (mid - 2) / 18)))


def test_ctc_steps_fit_one_batch(module):
    g = torch.Generator().manual_seed(1)
    batch = collate_ctc([(torch.randn(4000, generator=g), torch.tensor([1, 2, 3])),
                         (torch.randn(3000, generator=g), torch.tensor([4, 5]))])
    module.model.config.mask_time_prob = 0.0  # no SpecAugment on a batch this short
    opt = torch.optim.Adam(module.parameters(), lr=3e-3)
    module.train()
    x, mask = module._normalize(batch["waves"], batch["wave_lengths"])
    losses = []
    for _ in range(30):
        out = module.model(x, attention_mask=mask.long(), labels=batch["labels"])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(float(out.loss))
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.7 * losses[0]


def test_fast_dev_run_and_save_load_round_trip(module, tmp_path):
    data = [(torch.randn(3200), torch.tensor([1, 2])), (torch.randn(2400), torch.tensor([3]))]
    loader = torch.utils.data.DataLoader(data, batch_size=2, collate_fn=collate_ctc)
    L.Trainer(fast_dev_run=True, accelerator="cpu", logger=False, enable_progress_bar=False,
              enable_checkpointing=False).fit(module, loader)  # not the repo's checkpoints/ (the cwd's)
    out = save_recognizer(module.model, module.vocab, tmp_path / "rec", {"name": "tiny"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec"]  # no temporary folder left beside it
    rec = Recognizer.load(str(out))
    wave = torch.randn(1, 3200)
    log_probs, frames = rec(wave)
    assert log_probs.shape[-1] == len(module.vocab) and torch.isfinite(log_probs).all()
    save_recognizer(module.model, module.vocab, out, {"name": "tiny", "again": True})  # replaces in place
    assert (out / "card.json").read_text().count("again") == 1


def _augmenting_sampler(resume_epoch: int | None = None):
    from types import SimpleNamespace

    from leakloss.acoustic.recognizer_training import UNK, CorpusCTCDataset, LengthBucketSampler

    items = [SimpleNamespace(phones=["a"], duration=1.0, id=str(i)) for i in range(4)]
    corpus = SimpleNamespace(audio=lambda item: torch.randn(8000, generator=torch.Generator().manual_seed(int(item.id))))
    dataset = CorpusCTCDataset(corpus, items, {BLANK: 0, "a": 1, UNK: 2}, augment=True, seed=11)
    sampler = LengthBucketSampler([1.0] * 4, 2, seed=11, dataset=dataset)
    if resume_epoch is not None:  # what train_recognizers does with its checkpoint's counters
        sampler.epoch = resume_epoch
    return sampler, dataset


def _one_epoch(sampler, dataset) -> dict[int, torch.Tensor]:
    """Each item's waveform as a DataLoader over ``sampler`` reads it in one epoch (iter, then the items)."""
    return {i: dataset[i][0] for batch in sampler for i in batch}


def test_each_epoch_augments_anew_and_a_resumed_epoch_as_the_uninterrupted_one():
    # the augmentation seed had the dataset's epoch, which nothing advanced: every epoch heard one augmented copy
    sampler, dataset = _augmenting_sampler()
    epochs = [_one_epoch(sampler, dataset) for _ in range(3)]
    assert dataset.epoch == 2
    for a, b in ((0, 1), (1, 2)):  # every item heard anew
        assert not any(torch.equal(epochs[a][i], epochs[b][i]) for i in range(4))
    resumed = _one_epoch(*_augmenting_sampler(resume_epoch=2))
    assert all(torch.equal(resumed[i], epochs[2][i]) for i in range(4))
    sampler, dataset = _augmenting_sampler()  # and through a DataLoader, which iterates the sampler the same way
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_ctc)
    for _ in range(2):
        assert sum(1 for _ in loader) == 2
    assert dataset.epoch == 1


def test_the_augmentation_seed_is_the_same_in_every_process():
    import os
    import subprocess
    import sys

    code = "print(hash((11, 2, 3)) & 0x7FFFFFFF)"
    seen = {subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONHASHSEED=seed), capture_output=True,
                           text=True, check=True).stdout for seed in ("0", "1", "random")}
    assert len(seen) == 1
