"""The content loss: CTC through the frozen vocoder and recognizer on F5's clean-mel estimate."""

import math

import pytest
import torch
import torchaudio.functional as AF

from leakloss.constants import MEL_SAMPLE_RATE, SAMPLE_RATE


@pytest.fixture(scope="module")
def content():
    from train_f5.content import ContentCTC

    return ContentCTC.load("a")


@pytest.fixture(scope="module")
def reading():
    from leakloss.speech.synth import TRAIN_HINDI_VOICES, speak_text
    from leakloss.vocoder import log_mel

    said = speak_text("नमस्ते दुनिया", TRAIN_HINDI_VOICES[0])
    mel = log_mel(AF.resample(said.waveform, SAMPLE_RATE, MEL_SAMPLE_RATE)[None])[0]
    return mel, said.phones


def test_ctc_content_loss_matches_a_per_item_reference():
    from train_f5.content import ctc_content_loss

    g = torch.Generator().manual_seed(0)
    log_probs = torch.randn(3, 20, 6, generator=g).log_softmax(-1)
    frames = torch.tensor([20, 15, 9])
    targets = [[1, 2, 3], [4], [5, 5, 1, 2]]
    want = []
    for i, t in enumerate(targets):  # one item at a time, summed loss divided by its target length
        one = torch.nn.functional.ctc_loss(log_probs[i, : frames[i]][:, None], torch.tensor([t]), frames[i: i + 1],
                                           torch.tensor([len(t)]), blank=0, reduction="sum")
        want.append(one / len(t))
    assert torch.allclose(ctc_content_loss(log_probs, frames, targets, blank=0), torch.stack(want).mean(), atol=1e-5)


def test_impossible_alignments_count_zero_not_inf():
    from train_f5.content import ctc_content_loss

    log_probs = torch.randn(1, 3, 6).log_softmax(-1)
    loss = ctc_content_loss(log_probs, torch.tensor([3]), [[1, 2, 3, 4, 5]], blank=0)
    assert torch.isfinite(loss) and float(loss) == 0.0


@pytest.mark.slow
def test_the_reading_fits_its_own_phones_better_than_others_and_the_gradient_reaches_the_mel(content, reading):
    mel, phones = reading
    mels = mel[None].clone().requires_grad_(True)
    lengths = torch.tensor([mel.shape[0]])
    own, parts = content(mels, lengths, [content.targets(phones)])
    other, _ = content(mels, lengths, [content.targets(list(reversed(phones)))])
    assert parts.items == 1 and not parts.nonfinite
    assert float(own) < float(other)
    own.backward()
    assert mels.grad is not None and torch.isfinite(mels.grad).all() and mels.grad.abs().sum() > 0
    assert all(p.grad is None for p in content.parameters())  # frozen: nothing of the recognizer or vocoder trains


def test_items_without_targets_contribute_nothing(content, reading):
    mel, phones = reading
    loss, parts = content(mel[None], torch.tensor([mel.shape[0]]), [[]])
    assert float(loss) == 0.0 and parts.items == 0


def test_a_nonfinite_mel_never_gives_a_nonfinite_loss(content, reading):
    mel, phones = reading
    bad = mel.clone()
    bad[5, 3] = math.nan
    loss, parts = content(bad[None], torch.tensor([mel.shape[0]]), [content.targets(phones)])
    assert torch.isfinite(loss) and parts.nonfinite


@pytest.mark.slow
def test_a_tiny_run_with_the_content_loss_reports_it_and_both_probes(tmp_path, capsys):
    from leakloss.config import compose_config
    from train_f5.__main__ import run

    overrides = ["model.dim=32", "model.depth=1", "model.heads=2", "model.dim_head=16", "model.text_dim=16",
                 "model.conv_layers=1", "data.max_texts=12", "data.max_frames=400", "max_steps=3", "warmup_steps=2",
                 "content.weight=1.0", "data.workers=2", "probe.texts=2",
                 f"cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / 'out'}", "log_every=1"]
    info = run(compose_config("train_f5", overrides))
    assert info["step"] == 3 and set(info["probe_per"]) == {"a", "b"}
    out = capsys.readouterr().out
    assert " ctc " in out  # the content loss ran and was logged apart from the flow loss
