"""Groth16 backends behind one interface; all read and write the same snarkjs / circom files.

- ``ReferenceBackend`` (default, pure Python, always installed): ``dprag.zk.setup`` / ``prove`` / ``verify``.
- ``SnarkjsBackend``: the snarkjs command line run as a separate process on the files dprag exports (``.zkey``,
  ``.wtns``, ``verification_key.json``). Only used when the user has Node and asks for it; snarkjs (GPL-3.0) is never
  imported, linked or shipped by dprag. It has no ``setup`` here (snarkjs's needs a powers-of-tau file: make the key
  with ``snarkjs groth16 setup`` and ``read_zkey`` it, or use a dprag development key, which it proves with).

Proofs from either backend verify under the same verification key (their randomness differs).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from dprag.errors import DpragError
from dprag.zk import formats as F
from dprag.zk.keys import Proof, ProvingKey, VerifyingKey
from dprag.zk.r1cs import R1CS


class BackendError(DpragError):
    """An external prover is unavailable or failed (the message names it and its stderr's last line)."""


class Backend(Protocol):
    name: str

    def prove(self, pk: ProvingKey, witness: Sequence[int]) -> Proof: ...

    def verify(self, vk: VerifyingKey, proof: Proof, public: Sequence[int]) -> bool: ...


class ReferenceBackend:
    name = "reference"

    def __init__(self, workers: int = 1):
        self.workers = workers

    def setup(self, r1cs: R1CS) -> ProvingKey:
        """DEVELOPMENT-ONLY setup (see dprag.zk.setup)."""
        from dprag.zk.setup import setup

        return setup(r1cs)

    def prove(self, pk: ProvingKey, witness: Sequence[int]) -> Proof:
        from dprag.zk.prove import prove

        return prove(pk, witness, workers=self.workers)

    def verify(self, vk: VerifyingKey, proof: Proof, public: Sequence[int]) -> bool:
        from dprag.zk.verify import verify

        return verify(vk, proof, public)


class SnarkjsBackend:
    name = "snarkjs"

    def __init__(self, executable: str | None = None, timeout: float = 3600):
        exe = executable or shutil.which("snarkjs")
        if exe is None:
            raise BackendError(
                "snarkjs backend: no 'snarkjs' executable (install Node.js and "
                "'npm install snarkjs@0.7.6', or pass its path)"
            )
        self.exe = exe
        self.timeout = timeout

    def _run(self, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([self.exe, *args], cwd=cwd, capture_output=True, text=True, timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BackendError(f"snarkjs backend: {' '.join(args[:2])} could not run: {e}") from None

    def prove(self, pk: ProvingKey, witness: Sequence[int]) -> Proof:
        with tempfile.TemporaryDirectory(prefix="dprag-snarkjs-") as t:
            d = Path(t)
            F.write_zkey(d / "k.zkey", pk)
            F.write_wtns(d / "w.wtns", witness)
            res = self._run(["groth16", "prove", "k.zkey", "w.wtns", "proof.json", "public.json"], d)
            if res.returncode != 0 or not (d / "proof.json").exists():
                last = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
                raise BackendError(f"snarkjs backend: groth16 prove failed: {last[0][:200]}")
            return F.read_proof(d / "proof.json")

    def verify(self, vk: VerifyingKey, proof: Proof, public: Sequence[int]) -> bool:
        from dprag.zk.verify import check_public

        check_public(public, vk.n_public)
        with tempfile.TemporaryDirectory(prefix="dprag-snarkjs-") as t:
            d = Path(t)
            F.write_json(d / "vk.json", F.vk_to_json(vk))
            F.write_json(d / "proof.json", F.proof_to_json(proof))
            F.write_json(d / "public.json", F.public_to_json(public))
            res = self._run(["groth16", "verify", "vk.json", "public.json", "proof.json"], d)
            return res.returncode == 0 and "OK!" in res.stdout


def get_backend(name: str = "reference", **kw: Any) -> Backend:  # kw: the chosen backend's constructor arguments
    if name == "reference":
        return ReferenceBackend(**kw)
    if name == "snarkjs":
        return SnarkjsBackend(**kw)
    from dprag.errors import InvalidParameterError

    raise InvalidParameterError("backend", "must be 'reference' or 'snarkjs'", name)
