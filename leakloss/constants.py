"""One home for each constant the pipeline shares.

Thresholds of the heads are not here: they live in each head's card (:class:`leakloss.heads.HeadCard`), and
the conv-frame hop is computed from the recognizer's strides (:meth:`leakloss.acoustic.recognizer.Recognizer.conv_hop_s`).
"""

from __future__ import annotations

#: Every waveform the recognizers, the aligner, the scorer and the penalty see is 16 kHz mono.
SAMPLE_RATE = 16_000

#: F5-TTS / Vocos mel settings (24 kHz, hop 256, 1024-point FFT, 100 log-mel bins).
MEL_SAMPLE_RATE = 24_000
MEL_HOP = 256
MEL_N_FFT = 1024
MEL_BINS = 100
#: Those settings in words, as the model cards of the F5 trainers state them.
MEL_DESCRIPTION = f"vocos {MEL_SAMPLE_RATE // 1000} kHz, n_fft {MEL_N_FFT}, hop {MEL_HOP}, {MEL_BINS} bins"
#: Magnitude floor of the log mels (``log(clamp(x, MEL_FLOOR))``); ``log(MEL_FLOOR)`` is a silent frame.
MEL_FLOOR = 1e-5

#: Whisper's log-mel front end (16 kHz): STFT size and hop, mel bins, and its floor below each clip's maximum
#: (log10 units).
WHISPER_N_FFT, WHISPER_HOP, WHISPER_MELS = 400, 160, 80
WHISPER_FLOOR_BELOW_MAX = 8.0

#: The largest seed a run accepts: ``lightning.seed_everything`` and numpy take seeds in ``[0, 2**32 - 1]``.
SEED_MAX = 2**32 - 1

#: What ``leakloss recognize`` listens with unless told: the embedded recognizer that hears real speech best
#: (wb: 26.9% PER on real test speakers, w 32.5%; a and b, trained on espeak only, ~95%). A, B and w stay
#: available by name.
DEFAULT_RECOGNIZER = "wb"

#: The peak range the CTC recognizers were trained at (each training clip scaled to a random peak in it,
#: :func:`leakloss.speech.augment.random_augment`), and the peak the training signal's CTC passes (the reward's word
#: check, site placement, the margin term) scale every reading to, its centre: Whisper's log-mel is not
#: gain-invariant, so without one level the alignment moved with loudness and a reading's reward with it (0.99 at
#: gain 0.9, 0.01 at 0.7 for one Hindi-ward reading, 2026-12-07).
RECOGNIZER_TRAINING_PEAKS = (0.3, 1.0)
RECOGNIZER_HEARING_PEAK = sum(RECOGNIZER_TRAINING_PEAKS) / 2
