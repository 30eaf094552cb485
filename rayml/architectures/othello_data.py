"""Othello on a 4x4 board: move sequences and the exact board state after every move.

The MoE-X paper (Yang et al., ICML 2025, Section 5.1) scores interpretability with board-game
models after Karvonen et al. (2024, "Measuring Progress in Dictionary Learning for Language Model
Interpretability with Board Game Models"), who use chess and Othello. Chess cannot be trained far
enough on two CPU cores for a model's units to know the board better than an untrained model's
(issue 42: 1.1 nats per character against the paper's 0.21); Othello on a 4x4 board can: its games
are at most 12 moves long, every move depends on the exact board (a move must flip a line of the
opponent's discs), and the board state is known exactly at every move.

A game is a token sequence ``START m_1 m_2 ...`` with ``m_t`` the square (0..15) of the t-th move,
or ``PASS`` when the side to move has no legal move. Moves are uniform over the legal moves.
Board-state properties (BSPs, as in Karvonen's Othello set) are ``(square, state)`` indicators
after each move, relative to the side to move next: ``empty``, ``mine`` or ``theirs`` (16 x 3 = 48
properties). Assumed: the 4x4 board (the paper and Karvonen use 8x8 Othello / chess) and uniform
random play (Karvonen's Othello games are synthetic random games too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SIZE", "PAD", "START", "PASS", "VOCAB", "OthelloData", "legal_moves", "play", "play_game", "make_games",
           "bsp_names"]

SIZE = 4
PAD, START, PASS = 0, 1, 2 + SIZE * SIZE
VOCAB = PASS + 1  # PAD, START, 16 squares, PASS
_DIRS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))
STATES = ("empty", "mine", "theirs")


def _start_board() -> np.ndarray:
    """(16,) int8: 0 empty, 1 black, 2 white; the four centre discs set as in Othello."""
    b = np.zeros(SIZE * SIZE, dtype=np.int8)
    m = SIZE // 2
    b[(m - 1) * SIZE + m - 1] = b[m * SIZE + m] = 2
    b[(m - 1) * SIZE + m] = b[m * SIZE + m - 1] = 1
    return b


def _flips(board: np.ndarray, square: int, player: int) -> list[int]:
    """The squares that placing ``player``'s disc on ``square`` flips (empty: not a legal move)."""
    if board[square]:
        return []
    r0, c0 = divmod(square, SIZE)
    out = []
    for dr, dc in _DIRS:
        line, r, c = [], r0 + dr, c0 + dc
        while 0 <= r < SIZE and 0 <= c < SIZE and board[r * SIZE + c] == 3 - player:
            line.append(r * SIZE + c)
            r, c = r + dr, c + dc
        if line and 0 <= r < SIZE and 0 <= c < SIZE and board[r * SIZE + c] == player:
            out += line
    return out


def legal_moves(board: np.ndarray, player: int) -> list[int]:
    """The squares where ``player`` (1 black, 2 white) may move: each flips at least one disc."""
    if player not in (1, 2):
        raise ValueError(f"player must be 1 (black) or 2 (white), got {player!r}")
    return [s for s in range(SIZE * SIZE) if _flips(board, s, player)]


def play(board: np.ndarray, square: int, player: int) -> np.ndarray:
    """The board after ``player`` moves on ``square`` (``ValueError`` when the move is illegal)."""
    flips = _flips(board, square, player)
    if not flips:
        raise ValueError(f"square {square} is not a legal move for player {player}")
    out = board.copy()
    out[square] = player
    out[flips] = player
    return out


def _relative(board: np.ndarray, to_move: int) -> np.ndarray:
    """(16,) int8 with 0 empty, 1 the side to move's disc ("mine"), 2 the other side's ("theirs")."""
    rel = np.zeros_like(board)
    rel[board == to_move] = 1
    rel[board == 3 - to_move] = 2
    return rel


def play_game(rng: np.random.Generator) -> tuple[list[int], list[np.ndarray]]:
    """One random game: ``(tokens, boards)``, ``boards[t]`` the board after token ``t + 1`` (a move
    or a pass) relative to the side to move next. Black moves first; the game ends when neither
    side can move."""
    board, player = _start_board(), 1
    tokens, boards = [START], []
    while True:
        moves = legal_moves(board, player)
        if not moves:
            if not legal_moves(board, 3 - player):
                break
            tokens.append(PASS)
        else:
            sq = moves[int(rng.integers(len(moves)))]
            board = play(board, sq, player)
            tokens.append(2 + sq)
        player = 3 - player
        boards.append(_relative(board, player))
    return tokens, boards


@dataclass(frozen=True)
class OthelloData:
    """Fixed-length token sequences and the board after every move (the probe positions).

    Attributes:
        ids: (n_games, seq_len + 1) int64 token ids, padded with ``PAD``.
        probe_game, probe_pos: (n_probes,) the game and the token index of each move.
        boards: (n_probes, 16) int8 square states after that move (0 empty, 1 mine, 2 theirs).
        move_number: (n_probes,) the move's index in its game (1 for the first move).
    """

    ids: np.ndarray
    probe_game: np.ndarray
    probe_pos: np.ndarray
    boards: np.ndarray
    move_number: np.ndarray

    def bsp_labels(self) -> np.ndarray:
        """(n_probes, 48) bool: property ``square * 3 + state`` holds after each move."""
        n = self.boards.shape[0]
        onehot = np.zeros((n, SIZE * SIZE, 3), dtype=bool)
        onehot[np.arange(n)[:, None], np.arange(SIZE * SIZE)[None], self.boards.astype(np.int64)] = True
        return onehot.reshape(n, SIZE * SIZE * 3)


def bsp_names() -> list[str]:
    """Readable names of the 48 properties (``"b3=mine"``)."""
    files = "abcd"
    return [f"{files[s % SIZE]}{s // SIZE + 1}={st}" for s in range(SIZE * SIZE) for st in STATES]


def make_games(n_games: int, seed: int, *, seq_len: int = 16) -> OthelloData:
    """``n_games`` random games (game ``g`` from ``default_rng([seed, g])``), padded to ``seq_len + 1``.

    A 4x4 game has at most 12 moves plus passes, so ``seq_len = 16`` holds every game whole."""
    if isinstance(n_games, bool) or not isinstance(n_games, int) or n_games < 1:
        raise ValueError(f"n_games must be a positive integer, got {n_games!r}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 4:
        raise ValueError(f"seq_len must be an integer >= 4, got {seq_len!r}")
    ids = np.full((n_games, seq_len + 1), PAD, dtype=np.int64)
    pg, pp, bd, mn = [], [], [], []
    for g in range(n_games):
        tokens, boards = play_game(np.random.default_rng([int(seed), g]))
        row = tokens[: seq_len + 1]
        ids[g, : len(row)] = row
        for t in range(1, min(len(tokens), seq_len)):  # the hidden at a probe position is read, so < seq_len
            pg.append(g)
            pp.append(t)
            bd.append(boards[t - 1])
            mn.append(t)
    return OthelloData(ids=ids, probe_game=np.array(pg, dtype=np.int64), probe_pos=np.array(pp, dtype=np.int64),
                       boards=np.stack(bd) if bd else np.zeros((0, SIZE * SIZE), dtype=np.int8),
                       move_number=np.array(mn, dtype=np.int64))
