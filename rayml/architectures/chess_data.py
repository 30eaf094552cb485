"""Chess games as PGN character strings, and the board state at every move number.

The interpretability benchmark of MoE-X (Yang et al., "Mixture of Experts Made Intrinsically
Interpretable", ICML 2025, Section 5.1) follows Karvonen et al. (2024, "Measuring Progress in
Dictionary Learning for Language Model Interpretability with Board Game Models"): a character-level
language model reads PGN move strings such as ``;1.e4 e5 2.Nf3 Nc6 3.Bb5``, and its hidden units are
scored against board-state properties (BSPs) at the ``.`` after each move number, where it is
White's turn.

Games are generated offline with the ``chess`` package (python-chess): each game is played by two
random movers or by two shallow-search movers (one-ply greedy: the move that wins the most
material, ties broken at random), chosen per game. Assumed: the paper trains on human/Stockfish
games (Karvonen's lichess data set), which cannot be downloaded here; generated games keep the
board-state supervision exact.

BSPs are ``(square, piece)`` indicators: for each of the 64 squares, which of the 12 piece kinds or
"empty" stands there (13 x 64 = 832 properties), as in Karvonen's board-state feature set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ALPHABET", "PAD", "PIECES", "ChessData", "encode", "decode", "play_game", "make_games", "bsp_names"]

# PGN characters (``;`` starts a game, as in Karvonen's format); id 0 is padding.
ALPHABET = " #+-.0123456789;=BKNOQRabcdefghx"
PAD = 0
_CHAR_ID = {c: i + 1 for i, c in enumerate(ALPHABET)}
PIECES = "PNBRQKpnbrqk"  # python-chess symbols; index 12 is "empty"
_PIECE_VALUE = {1: 1, 2: 3, 3: 3, 4: 5, 5: 9, 6: 0}


def encode(text: str) -> list[int]:
    """Character ids of a PGN string (``ValueError`` on a character outside ``ALPHABET``)."""
    try:
        return [_CHAR_ID[c] for c in text]
    except KeyError as exc:
        raise ValueError(f"text: character {exc.args[0]!r} is not in the PGN alphabet") from None


def decode(ids) -> str:
    """The PGN string of character ids (padding dropped)."""
    return "".join(ALPHABET[int(i) - 1] for i in ids if int(i) != PAD)


def _board_vector(board) -> np.ndarray:
    """(64,) int8: the piece index (``PIECES``) on each square, 12 for empty."""
    out = np.full(64, 12, dtype=np.int8)
    for sq, piece in board.piece_map().items():
        out[sq] = PIECES.index(piece.symbol())
    return out


def _greedy_move(board, moves, rng):
    gains = []
    for m in moves:
        victim = board.piece_at(m.to_square)
        gain = _PIECE_VALUE[victim.piece_type] if victim is not None else (1 if board.is_en_passant(m) else 0)
        if m.promotion:
            gain += _PIECE_VALUE[m.promotion] - 1
        gains.append(gain)
    gains = np.array(gains)
    best = np.flatnonzero(gains == gains.max())
    return moves[int(rng.choice(best))]


def play_game(rng: np.random.Generator, *, max_plies: int = 80, policy: str = "random") -> tuple[str, list[np.ndarray]]:
    """One game: ``(pgn, boards)`` with ``boards[n]`` the board before White's move ``n + 1``.

    ``policy`` is ``"random"`` (uniform over legal moves) or ``"greedy"`` (one-ply material search).
    """
    import chess

    if policy not in ("random", "greedy"):
        raise ValueError(f"policy must be 'random' or 'greedy', got {policy!r}")
    board = chess.Board()
    parts, boards = [";"], []
    for ply in range(max_plies):
        moves = list(board.legal_moves)
        if not moves:
            break
        move = moves[int(rng.integers(len(moves)))] if policy == "random" else _greedy_move(board, moves, rng)
        san = board.san(move)
        if ply % 2 == 0:
            boards.append(_board_vector(board))
            parts.append(f"{ply // 2 + 1}.{san}")
        else:
            parts.append(f" {san} ")
        board.push(move)
    return "".join(parts).rstrip(), boards


@dataclass(frozen=True)
class ChessData:
    """Fixed-length character sequences and the board at every ``.`` (probe) position.

    Attributes:
        ids: (n_games, seq_len + 1) int64 character ids, padded with ``PAD``.
        probe_game, probe_pos: (n_probes,) the game and the character index of each ``.``.
        boards: (n_probes, 64) int8 piece index per square at that probe (12: empty).
    """

    ids: np.ndarray
    probe_game: np.ndarray
    probe_pos: np.ndarray
    boards: np.ndarray

    def bsp_labels(self) -> np.ndarray:
        """(n_probes, 832) bool: property ``square * 13 + piece`` holds at each probe."""
        onehot = np.zeros((self.boards.shape[0], 64, 13), dtype=bool)
        n = np.arange(self.boards.shape[0])[:, None]
        onehot[n, np.arange(64)[None], self.boards.astype(np.int64)] = True
        return onehot.reshape(self.boards.shape[0], 64 * 13)


def bsp_names() -> list[str]:
    """Readable names of the 832 properties (``"e4=N"``, ``"a1=."``)."""
    files = "abcdefgh"
    return [f"{files[sq % 8]}{sq // 8 + 1}={(PIECES + '.')[p]}" for sq in range(64) for p in range(13)]


def make_games(n_games: int, seq_len: int, seed: int, *, greedy_share: float = 0.5,
               max_plies: int = 80) -> ChessData:
    """``n_games`` generated games cut to ``seq_len + 1`` characters, with their probe boards.

    Args:
        n_games: number of games (each one sequence).
        seq_len: characters a model reads (the extra one is the last target).
        seed: seeds the movers (game ``g`` uses ``default_rng([seed, g])``).
        greedy_share: the share of games played by the one-ply material search.
        max_plies: the longest game (a game ends earlier at mate or stalemate).
    """
    if isinstance(n_games, bool) or not isinstance(n_games, int) or n_games < 1:
        raise ValueError(f"n_games must be a positive integer, got {n_games!r}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 8:
        raise ValueError(f"seq_len must be an integer >= 8, got {seq_len!r}")
    if not 0.0 <= float(greedy_share) <= 1.0:
        raise ValueError(f"greedy_share must be in [0, 1], got {greedy_share!r}")
    ids = np.full((n_games, seq_len + 1), PAD, dtype=np.int64)
    pg, pp, bd = [], [], []
    for g in range(n_games):
        rng = np.random.default_rng([int(seed), g])
        policy = "greedy" if rng.random() < greedy_share else "random"
        pgn, boards = play_game(rng, max_plies=max_plies, policy=policy)
        row = encode(pgn)[: seq_len + 1]
        ids[g, : len(row)] = row
        dots = [i for i, c in enumerate(pgn[: seq_len]) if c == "."]
        # the n-th '.' belongs to move number n + 1; its board is boards[n]
        for n, pos in enumerate(dots):
            pg.append(g)
            pp.append(pos)
            bd.append(boards[n])
    return ChessData(ids=ids, probe_game=np.array(pg, dtype=np.int64), probe_pos=np.array(pp, dtype=np.int64),
                     boards=np.stack(bd) if bd else np.zeros((0, 64), dtype=np.int8))
