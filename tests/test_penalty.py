import pytest
import torch

from leakloss.functional.leak import leak_penalty_from_logits, pooled_site_logits, site_masks
from leakloss.heads import RawConvHead
from leakloss.penalty import LeakPenalty
from leakloss.timing import TimedSite
from leakloss.vocoder import MelToWave


@pytest.fixture(scope="module")
def penalty(tiny_rec):
    torch.manual_seed(0)
    head = RawConvHead(in_channels=16, width=8)
    return LeakPenalty(tiny_rec, head, mel_to_wave=MelToWave.tiny(0))


SITES = [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.5, 0.62, "quality", "ʌi̯->ɛː")]


def _frozen_grads_are_none(penalty):
    return all(p.grad is None for p in penalty.parameters()) and not any(p.requires_grad for p in penalty.parameters())


@pytest.mark.parametrize("kind,seconds", [("silence", 1.0), ("noise", 1.0), ("noise", 0.1), ("noise", 30.0)])
def test_finite_and_differentiable_wave_input(penalty, kind, seconds):
    n = int(16000 * seconds)
    wave = torch.zeros(1, n) if kind == "silence" else torch.randn(1, n) * 0.1
    wave.requires_grad_(True)
    loss, parts = penalty(waves=wave, sites=[SITES])
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(wave.grad).all()
    assert _frozen_grads_are_none(penalty)
    assert parts.frame_probs.shape[0] == 1 and not parts.penalty.requires_grad
    if seconds >= 1.0:
        assert int(parts.active_sites) == 2 and set(parts.per_kind) == {"deletion", "quality"}


def test_no_sites_gives_zero_loss_and_zero_gradient(penalty):
    wave = (torch.randn(2, 16000) * 0.1).requires_grad_(True)
    loss, parts = penalty(waves=wave, sites=[[], []])
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.equal(wave.grad, torch.zeros_like(wave))
    assert int(parts.active_sites) == 0


def test_sites_beyond_the_audio_are_inactive(penalty):
    wave = torch.randn(1, 4000) * 0.1
    loss, parts = penalty(waves=wave, sites=[[TimedSite(2.0, 2.1, "deletion", "ʌ->∅")]])
    assert float(loss) == 0.0 and int(parts.active_sites) == 0


def test_mel_input_gradient_reaches_mel_not_vocoder(penalty):
    mels = torch.randn(1, 120, 100, requires_grad=True)
    loss, _ = penalty(mels=mels, mel_lengths=torch.tensor([120]), sites=[SITES])
    loss.backward()
    assert torch.isfinite(mels.grad).all() and mels.grad.abs().sum() > 0
    assert _frozen_grads_are_none(penalty)


def test_bf16_autocast_on_cpu(penalty):
    wave = (torch.randn(1, 16000) * 0.1).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = penalty(waves=wave, sites=[SITES])
    assert loss.dtype == torch.float32
    loss.backward()
    assert torch.isfinite(wave.grad).all()


def test_batch_consistency(penalty):
    a, b = torch.randn(16000) * 0.1, torch.randn(16000) * 0.1
    _, pa = penalty(waves=a[None], sites=[SITES])
    _, pb = penalty(waves=b[None], sites=[SITES[:1]])
    _, pab = penalty(waves=torch.stack([a, b]), sites=[SITES, SITES[:1]])
    assert torch.allclose(pab.site_probs, torch.cat([pa.site_probs, pb.site_probs]), atol=1e-5)


def test_pooling_matches_naive_reference_and_gradcheck():
    torch.manual_seed(0)
    logits = torch.randn(2, 30, dtype=torch.float64, requires_grad=True)
    masks = torch.zeros(3, 30, dtype=torch.bool)
    masks[0, 3:9] = masks[1, 10:12] = masks[2, 0:30] = True
    item = torch.tensor([0, 0, 1])
    pooled = pooled_site_logits(logits, masks, item)
    for r in range(3):
        x = logits[item[r]][masks[r]] * 4.0
        naive = torch.log(torch.exp(x).mean()) / 4.0
        assert torch.allclose(pooled[r], naive, atol=1e-5)

    assert pooled.dtype == torch.float64
    assert torch.autograd.gradcheck(lambda x: leak_penalty_from_logits(x, masks, item)[0], (logits,))


def test_penalty_is_bce_towards_no_leak_and_does_not_saturate():
    logits = torch.tensor([[12.0] * 10, [-3.0] * 10], dtype=torch.float64, requires_grad=True)
    masks = torch.zeros(3, 10, dtype=torch.bool)
    masks[0, 2:5] = masks[1, 0:10] = True  # row 2: empty mask, inactive
    item = torch.tensor([0, 1, 1])
    loss, probs = leak_penalty_from_logits(logits, masks, item)
    pooled = pooled_site_logits(logits, masks, item)[:2]
    expected = torch.nn.functional.binary_cross_entropy_with_logits(pooled, torch.zeros_like(pooled))
    assert torch.allclose(loss, expected) and torch.allclose(probs[:2], torch.sigmoid(pooled))
    loss.backward()
    # a saturated site (p = 1 - 6e-6) still pushes with ~1/2 per unit logit (mean over 2 sites)
    assert logits.grad[0].sum() > 0.49


def test_site_masks_cover_the_site():
    masks, index = site_masks([[TimedSite(0.1, 0.2, "deletion", "ʌ->∅")]], 100, hop_s=0.005, pad_s=0.0)
    on = masks[0].nonzero().flatten()
    assert on.min() == 20 and on.max() == 39 and index[0][0] == 0


def test_wrong_number_of_site_lists_is_a_clear_error(penalty):
    with pytest.raises(ValueError, match="one list per item"):
        penalty(waves=torch.randn(2, 8000), sites=[SITES])


def test_dataset_sites_are_placed_once_and_cached_next_to_the_data(tmp_path, monkeypatch):
    import leakloss.penalty as penalty_module
    from leakloss.penalty import place_dataset_sites

    calls = []

    def fake_place(wave, text, recognizer, finder=None):
        calls.append(text)
        return [] if text == "x" else [TimedSite(0.1, 0.2, "deletion", "ʌ->∅", text)]

    monkeypatch.setattr(penalty_module, "place_sites", fake_place)
    rec = type("Rec", (), {"name": "a@test"})()
    a, b = torch.zeros(1600), torch.ones(1600) * 0.1
    cache = tmp_path / "data" / "leak_sites.jsonl"
    first = place_dataset_sites([(a, "घर"), (b, "x")], rec, cache)
    assert first == [[TimedSite(0.1, 0.2, "deletion", "ʌ->∅", "घर")], []] and calls == ["घर", "x"]
    assert cache.exists() and not list(cache.parent.glob("*.tmp"))
    again = place_dataset_sites([(b, "x"), (a, "घर")], rec, cache)  # order changes, nothing recomputed
    assert again == [[], first[0]] and calls == ["घर", "x"]
    other = type("Rec", (), {"name": "a@other"})()  # another recognizer: placed again
    place_dataset_sites([(a, "घर")], other, cache)
    assert calls == ["घर", "x", "घर"]
