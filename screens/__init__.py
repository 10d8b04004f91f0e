"""Textual screens. They draw Frames and never talk to NVML or HTTP themselves."""
