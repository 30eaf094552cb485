"""Bandits and games: vectorised learners and environments (many independent runs advanced together)."""
