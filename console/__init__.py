"""inferdeck: terminal operations console for GPU inference nodes (no Textual here)."""

__version__ = "0.1.0"
