"""Data-centric methods and shared data: robust subset (coreset) selection such as GM Matching,
DIRECT active learning, mid-angle replay, and ``image_text``, rayml's digits CLIP-style image-text
encoder (the backbone of PoisonedEye and FedAG)."""
