"""Architectures built on the language-model substrate.

Modules:
    moe_x: MoE-X (ICML 2025): the MoE layer as a wide sparse ReLU MLP with sparsity-aware routing,
        its baselines (dense GELU/ReLU MLPs, a top-k Switch MoE, an SAE) and the chess
        board-state interpretability scores.
    chess_data: chess games generated with the ``chess`` package as PGN character strings, with
        the board state at every move number.
    l2d: L2D (ICML 2025): a diffusion / flow path beside a frozen substrate LM.

Submodules are imported on use (``from rayml.architectures import moe_x``); importing this
package does not import torch.
"""

__all__ = ["moe_x", "chess_data", "l2d"]
