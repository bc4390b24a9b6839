"""Pretrain a small Hindi-base F5 (F5-TTS's own ``DiT``/``CFM``) on espeak ``hi`` readings: ``python -m train_f5``."""
