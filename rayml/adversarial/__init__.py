"""Adversarial attacks on learning systems: knowledge poisoning of vision-language RAG (PoisonedEye)."""
