"""Data selection: robust subset (coreset) selection such as GM Matching."""
