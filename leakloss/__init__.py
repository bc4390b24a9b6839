"""leakloss: find where Nepali TTS still sounds Hindi, and turn it into a training signal."""

__version__ = "0.1.0"
