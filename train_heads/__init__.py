"""Head training: Lightning modules, data modules, and the Hydra entry point (``python -m train_heads``)."""
