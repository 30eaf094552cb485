"""rayml.signed_pickle: nothing is unpickled from a file this user's key did not sign for this run."""

from __future__ import annotations

import pickle

import pytest

from rayml import signed_pickle


class _Boom:
    def __reduce__(self):  # unpickling this would run code
        return (exec, ("raise SystemExit('pwned')",))


def test_round_trip_and_fingerprint(tmp_path):
    path = tmp_path / "state.pkl"
    signed_pickle.dump({"a": [1, 2], "f": lambda x: x + 1}, path, "fp-1")
    state = signed_pickle.load(path, "fp-1")
    assert state["a"] == [1, 2] and state["f"](1) == 2
    with pytest.raises(signed_pickle.InvalidCheckpoint, match="another run"):
        signed_pickle.load(path, "fp-2")


def test_a_planted_or_altered_file_is_refused_before_unpickling(tmp_path):
    planted = tmp_path / "planted.pkl"
    planted.write_bytes(pickle.dumps(_Boom()))
    with pytest.raises(signed_pickle.InvalidCheckpoint, match="not a rayml signed checkpoint"):
        signed_pickle.load(planted, "fp")
    # a forged header with the right fingerprint but no key: the signature check refuses it
    payload = pickle.dumps(_Boom())
    forged = tmp_path / "forged.pkl"
    forged.write_bytes(signed_pickle.MAGIC + b'{"fingerprint": "fp", "sha256": "x"}\n' + b"0" * 64 + b"\n" + payload)
    with pytest.raises(signed_pickle.InvalidCheckpoint, match="signature"):
        signed_pickle.load(forged, "fp")
    good = tmp_path / "good.pkl"
    signed_pickle.dump([1], good, "fp")
    data = bytearray(good.read_bytes())
    data[-3] ^= 1
    good.write_bytes(bytes(data))
    with pytest.raises(signed_pickle.InvalidCheckpoint):
        signed_pickle.load(good, "fp")
