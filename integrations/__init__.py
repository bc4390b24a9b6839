"""Glue to external training stacks (F5-TTS / IndicF5). Optional extras; the ``leakloss`` library never imports these."""
