"""Hydra entry point that trains the embedded phone recognizers (``python -m train_recognizers``)."""
