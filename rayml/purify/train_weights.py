"""Retrain the weights shipped in ``rayml/purify/weights``: ``python -m rayml.purify.train_weights``.

Trains the digits classifier and the score network with their default configs on one torch
thread (a few minutes on a CPU) and writes ``<name>.pt`` with its card ``<name>.json`` (command,
seed, data, training time, scores).
"""

from __future__ import annotations

import json

__all__ = ["main"]

COMMAND = "python -m rayml.purify.train_weights"


def main() -> None:
    """Train both models, score them on the digits test split, write weights and cards."""
    import torch

    from rayml.purify import classifier as C
    from rayml.purify import diffusion as D
    from rayml.purify import ssni as S

    torch.set_num_threads(1)
    _, _, xte, yte = D.digits_split()
    clf, card = C.train_classifier()
    card.update(command=COMMAND, seed=card["config"]["seed"],
                data="sklearn load_digits, stratified 70/30 split random_state=0, training part",
                scores={"train_accuracy": card["train_accuracy"], "test_accuracy": card["test_accuracy"],
                        "test_images": int(xte.shape[0])})
    D.save_model(clf, card, D.WEIGHTS_DIR / "classifier_digits.pt")
    print(json.dumps(card))
    model, card = D.train_score_model(log=print)
    with torch.no_grad():
        out, _ = S.purify(model, xte, S.PurifyConfig(t_star=100.0, stride=1.0), seed=0)
    card.update(command=COMMAND, seed=card["config"]["seed"],
                data="sklearn load_digits, stratified 70/30 split random_state=0, training part, scaled to [-1, 1]",
                scores={"final_dsm_loss": card["final_loss"],
                        "diffpure_t100_ddpm_clean_test_accuracy": C.accuracy(clf, out, yte),
                        "classifier_clean_test_accuracy": C.accuracy(clf, xte, yte), "test_images": int(xte.shape[0])})
    D.save_model(model, card, D.WEIGHTS_DIR / "score_digits.pt")
    print(json.dumps(card))


if __name__ == "__main__":
    main()
