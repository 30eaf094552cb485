"""Architectures built on the language-model substrate.

Modules:
    moe_x: MoE-X (ICML 2025): the MoE layer as a wide sparse ReLU MLP with sparsity-aware routing,
        its baselines (dense GELU/ReLU MLPs, a top-k Switch MoE, an SAE) and the board-state
        interpretability scores.
    othello_data: 4x4 Othello games as move sequences, with the exact board after every move
        (the MoE-X experiment's game).
    chess_data: chess games generated with the ``chess`` package as PGN character strings, with
        the board state at every move number (the paper's game; too long to train on 2 cores).
    l2d: L2D (ICML 2025): a diffusion / flow path beside a frozen substrate LM.

Submodules are imported on use (``from rayml.architectures import moe_x``); importing this
package does not import torch.
"""

__all__ = ["moe_x", "othello_data", "chess_data", "l2d"]
