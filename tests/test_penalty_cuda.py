"""The embedded leak penalty on a CUDA device: the same loss and input gradient as on the CPU, finite under bf16
autocast and for bf16 waves, a NaN item masked, outputs on the input's device. Skipped without CUDA (run on a lent
H200 on 2026-12-04: see the README's GPU row)."""

import pytest
import torch

from leakloss.penalty import LeakPenalty
from leakloss.timing import TimedSite
from tests.conftest import needs_embedded

pytestmark = [pytest.mark.gpu, needs_embedded,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SITES = [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.5, 0.62, "quality", "ʌi̯->ɛː"),
         TimedSite(1.1, 1.2, "deletion", "ʌ->∅")]
LENGTHS = torch.tensor([32000, 24000, 9000, 32000])


@pytest.fixture(scope="module")
def penalties():
    return LeakPenalty.load(), LeakPenalty.load(device="cuda")


def _waves() -> torch.Tensor:
    torch.manual_seed(0)
    waves = torch.randn(4, 32000) * 0.1
    waves[3] = 0.0  # digital silence: a zero gradient, not a NaN
    return waves


def _run(penalty, waves, device, dtype=torch.float32, autocast=False):
    x = waves.to(device, dtype).requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        loss, parts = penalty(waves=x, wave_lengths=LENGTHS.to(device), sites=[SITES] * len(x))
    loss.backward()
    return loss.detach(), x.grad, parts


def test_cuda_gives_the_cpu_loss_and_gradient(penalties):
    cpu, gpu = penalties
    loss_c, grad_c, _ = _run(cpu, _waves(), "cpu")
    loss_g, grad_g, parts = _run(gpu, _waves(), "cuda")
    assert loss_g.device.type == "cuda" and parts.frame_probs.device.type == "cuda" and grad_g.device.type == "cuda"
    torch.testing.assert_close(loss_g.cpu(), loss_c, rtol=1e-3, atol=1e-6)
    # cuDNN convolutions sum in another order: compare the gradient relative to its largest entry
    assert float((grad_g.cpu() - grad_c).abs().max() / grad_c.abs().max()) < 1e-2
    assert float(grad_g[3].abs().max()) == 0.0


def test_bf16_autocast_and_bf16_waves_stay_finite(penalties):
    _, gpu = penalties
    loss_32, _, _ = _run(gpu, _waves(), "cuda")
    loss_ac, grad_ac, _ = _run(gpu, _waves(), "cuda", autocast=True)
    assert torch.isfinite(loss_ac) and torch.isfinite(grad_ac).all()
    assert abs(float(loss_ac) - float(loss_32)) < 0.05 * abs(float(loss_32))
    loss_bf, grad_bf, _ = _run(gpu, _waves(), "cuda", dtype=torch.bfloat16)
    assert loss_bf.dtype == torch.float32 and grad_bf.dtype == torch.bfloat16  # logs and sums in fp32
    assert torch.isfinite(loss_bf) and torch.isfinite(grad_bf.float()).all()


def test_a_nan_item_is_masked_on_cuda(penalties):
    _, gpu = penalties
    waves = _waves()
    waves[1, 100] = float("nan")
    loss, grad, parts = _run(gpu, waves, "cuda")
    assert torch.isfinite(loss) and torch.isfinite(grad).all() and int(parts.nonfinite_items) == 1
    assert float(grad[1].abs().max()) == 0.0
