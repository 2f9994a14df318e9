"""Signed checkpoints and notes (audit/protocol/ledger/checkpoint.py).

Independent expected values: the worked examples of golang.org/x/mod/sumdb/note (note.go documentation and
note_test.go: the PeterNeumann / EnochRoot keys and signatures; Ed25519 is deterministic so our signature must
be byte-identical), the key pairs of transparency-dev/formats log/note_test.go (skey -> vkey derivation), and a
real checkpoint of sum.golang.org signed by its published key (transparency-dev/formats log/note_test.go).
"""

from __future__ import annotations

import base64

import pytest

from dprag.audit.protocol.ledger.checkpoint import (
    Checkpoint,
    NoteSigner,
    NoteVerifier,
    key_hash,
    open_checkpoint,
    open_note,
    sign_checkpoint,
    sign_note,
)
from dprag.audit.protocol.ledger.errors import CheckpointError, KeyFormatError, MalformedNoteError, SignatureError
from dprag.audit.protocol.ledger.rfc6962 import mth
from dprag.audit.protocol.ledger.store import MemoryLog
from dprag.errors import InvalidParameterError

PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)

TD_KEYS = [  # transparency-dev/formats log/note_test.go
    (
        "PRIVATE+KEY+Log+2271c621+AdEIq9FLRQni54Wg68T96VJO+iayOaulswav2DUMKgvQ",
        "Log+2271c621+AemuH5ooBpEPcr+W8onrjA1NfuzBVHdezakU81Ekarvs",
    ),
    (
        "PRIVATE+KEY+Known+451c786d+AQPRoE2+Z+Ed1HaHBA9F/FfracvcZ2rDU39kCecMEoci",
        "Known+451c786d+AXAQ0T7lbwuY4ABJ9/MYY9bWV3hmSyOGVt2x42NkmdUH",
    ),
    (
        "PRIVATE+KEY+KnownAgain+4893b26c+ARhZda/l25zjGZswYLDZsLNRzNpmv5wYTN9IoTr1OJ2+",
        "KnownAgain+4893b26c+AQ+LR7BFF/F/dkpIBjBpSvT0crkteizuUkavAoGeaYMj",
    ),
    (
        "PRIVATE+KEY+Unknown+fdbb2e08+Aav2knTC6orbhXX8pMWuNiWgO+Wwk2DB+h1eU2Q1W1nU",
        "Unknown+fdbb2e08+AWgRIYZ+8x1Vl+1Q+sR8zciNHiYI1SdlBjNw+RV0rots",
    ),
]

SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_NOTE = (
    "go.sum database tree\n6476701\nmb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=\n\n"
    "\u2014 sum.golang.org "
    "Az3grsLX85Gz+s1SiTbgkuqxgItqFq7gsMUEyVnrsa9LM7Us9S+1xbFIGu95949rj4nPRYfvimWEPWL+o3GeoWwOoAw=\n"
).encode()


def test_go_note_example_is_reproduced_byte_for_byte():
    signer = NoteSigner.from_skey(PETER_SKEY)
    assert signer.vkey() == PETER_VKEY
    assert signer.skey() == PETER_SKEY
    assert signer.key_hash == 0xC74F20A3
    assert sign_note(TEXT, signer) == (TEXT + "\n" + PETER_SIG).encode()
    v = NoteVerifier.from_vkey(PETER_VKEY)
    assert v == signer.verifier() and v.vkey() == PETER_VKEY


def test_key_hash_definition():
    import hashlib

    v = NoteVerifier.from_vkey(PETER_VKEY)
    want = hashlib.sha256(b"PeterNeumann\n\x01" + v.public_key).digest()[:4]
    assert key_hash("PeterNeumann", b"\x01" + v.public_key) == int.from_bytes(want, "big") == 0xC74F20A3


@pytest.mark.parametrize("skey,vkey", TD_KEYS)
def test_transparency_dev_key_pairs(skey, vkey):
    s = NoteSigner.from_skey(skey)
    assert s.vkey() == vkey and s.skey() == skey


def test_open_note_verified_unverified_and_duplicates():
    peter, enoch = NoteVerifier.from_vkey(PETER_VKEY), NoteVerifier.from_vkey(ENOCH_VKEY)
    msg = (TEXT + "\n" + PETER_SIG + ENOCH_SIG).encode()
    n = open_note(msg, [peter])
    assert n.text == TEXT
    assert [(s.name, s.key_hash) for s in n.signatures] == [("PeterNeumann", 0xC74F20A3)]
    assert [(s.name, s.key_hash) for s in n.unverified] == [("EnochRoot", 0xAF0CFE78)]
    n = open_note(msg, [peter, enoch])
    assert len(n.signatures) == 2 and not n.unverified
    with pytest.raises(SignatureError, match="no verifiable"):
        open_note(msg, [])
    # repeated lines are dropped, as in Go
    n = open_note((TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG).encode(), [peter])
    assert len(n.signatures) == 1 and len(n.unverified) == 1
    # an invalid signature by a known key is an error, not silently ignored
    bad = PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(SignatureError, match="invalid signature"):
        open_note((TEXT + "\n" + bad).encode(), [peter])
    with pytest.raises(MalformedNoteError):
        open_note((TEXT + "\n" + PETER_SIG * 101).encode(), [peter])


@pytest.mark.parametrize(
    "msg",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        TEXT
        + "\n"
        + (
            "\u2014 Bad Name "
            "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
        ),
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
        TEXT
        + "\n"
        + (
            "- PeterNeumann "
            "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
        ),
        TEXT + "\n" + "\u2014 PeterNeumann\n",
        TEXT + "\n" + "\u2014 PeterNeumann AAAA\n",  # < 5 bytes
        TEXT + "\n" + PETER_SIG.replace("AM=", "AN="),  # non-canonical base64 (padding bits set)
        TEXT + "\r\n" + PETER_SIG,
    ],
)
def test_malformed_notes_are_rejected(msg):
    with pytest.raises(MalformedNoteError):
        open_note(msg.encode(), [NoteVerifier.from_vkey(PETER_VKEY)])


def test_invalid_utf8_rejected():
    with pytest.raises(MalformedNoteError):
        open_note(b"\xff" + (TEXT + "\n" + PETER_SIG).encode(), [NoteVerifier.from_vkey(PETER_VKEY)])


def test_vkey_manglings_rejected():
    """As Go's TestNewVerifier: every proper substring and every single-byte increment is rejected."""
    NoteVerifier.from_vkey(PETER_VKEY)
    b = PETER_VKEY.encode()
    for i in range(len(b) + 1):
        for j in range(i + 1, len(b) + 1):
            if (i, j) != (0, len(b)):
                with pytest.raises(KeyFormatError):
                    NoteVerifier.from_vkey(b[i:j].decode())
    for i in range(len(b)):
        m = bytearray(b)
        m[i] += 1
        with pytest.raises(KeyFormatError):
            NoteVerifier.from_vkey(m.decode())
    # wrong length key / unknown algorithm, each with a recomputed (valid) key hash
    for key in (b"\x01" + bytes(31), b"\x02" + NoteVerifier.from_vkey(PETER_VKEY).public_key):
        vk = f"PeterNeumann+{key_hash('PeterNeumann', key):08x}+{base64.b64encode(key).decode()}"
        with pytest.raises(KeyFormatError):
            NoteVerifier.from_vkey(vk)


def test_skey_manglings_rejected():
    b = PETER_SKEY.encode()
    for i in range(len(b) + 1):
        for j in range(i + 1, len(b) + 1):
            if (i, j) != (0, len(b)):
                with pytest.raises(KeyFormatError):
                    NoteSigner.from_skey(b[i:j].decode())
    for i in range(len(b)):
        m = bytearray(b)
        m[i] += 1
        with pytest.raises(KeyFormatError):
            NoteSigner.from_skey(m.decode())


def test_real_sumdb_checkpoint_verifies():
    v = NoteVerifier.from_vkey(SUMDB_VKEY)
    cp, note = open_checkpoint(SUMDB_NOTE, "go.sum database tree", v)
    assert cp.size == 6476701 and cp.origin == "go.sum database tree"
    assert cp.root == base64.b64decode("mb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=")
    assert cp.body().decode() == note.text
    with pytest.raises(SignatureError):
        open_checkpoint(SUMDB_NOTE, "Go rocks but I might have the wrong ID", v)


def _signed_checkpoint():
    log = MemoryLog([b"a", b"b", b"c"])
    signer = NoteSigner.from_skey(TD_KEYS[0][0])
    return log, signer, log.checkpoint(signer, "example.com/dprag/ledger", extensions=["ts 1700000000"])


def test_checkpoint_round_trip_and_format():
    log, signer, msg = _signed_checkpoint()
    text = msg.decode()
    body, sig = text.split("\n\n")
    assert (
        body == "example.com/dprag/ledger\n3\n" + base64.b64encode(mth([b"a", b"b", b"c"])).decode() + "\nts 1700000000"
    )
    assert sig.startswith("\u2014 Log ") and sig.endswith("\n")
    raw = base64.b64decode(sig[len("\u2014 Log ") :])
    assert raw[:4] == bytes.fromhex("2271c621") and len(raw) == 68
    cp, note = open_checkpoint(msg, "example.com/dprag/ledger", signer.verifier())
    assert cp == Checkpoint("example.com/dprag/ledger", 3, log.root(), ("ts 1700000000",))
    assert Checkpoint.parse(cp.body()) == cp


def test_every_single_bit_flip_of_a_signed_checkpoint_is_rejected():
    log, signer, msg = _signed_checkpoint()
    v = signer.verifier()
    for i in range(len(msg)):
        for bit in range(8):
            m = bytearray(msg)
            m[i] ^= 1 << bit
            with pytest.raises(CheckpointError):
                open_checkpoint(bytes(m), "example.com/dprag/ledger", v)
    for cut in range(len(msg)):  # every truncation
        with pytest.raises(CheckpointError):
            open_checkpoint(msg[:cut], "example.com/dprag/ledger", v)


def test_cosignatures_and_wrong_keys():
    log, signer, _ = _signed_checkpoint()
    witness = NoteSigner.from_skey(TD_KEYS[1][0])
    cp = Checkpoint("example.com/dprag/ledger", log.size, log.root())
    msg = sign_checkpoint(cp, signer, witness)
    got, note = open_checkpoint(msg, cp.origin, signer.verifier())
    assert got == cp and len(note.signatures) == 1 and len(note.unverified) == 1
    got, note = open_checkpoint(msg, cp.origin, signer.verifier(), witness.verifier())
    assert len(note.signatures) == 2
    # signed only by the witness: not a log checkpoint
    with pytest.raises(SignatureError):
        open_checkpoint(sign_checkpoint(cp, witness), cp.origin, signer.verifier(), witness.verifier())
    # a different key with the log's name: unknown key hash -> no log signature
    impostor = NoteSigner.generate("Log")
    with pytest.raises(SignatureError):
        open_checkpoint(sign_checkpoint(cp, impostor), cp.origin, signer.verifier())
    # a body that is not a checkpoint, validly signed
    with pytest.raises(MalformedNoteError):
        open_checkpoint(
            sign_note("if this is a valid checkpoint then I'll eat my hat\n", signer), cp.origin, signer.verifier()
        )


@pytest.mark.parametrize(
    "body",
    [
        "o\n01\n{r}\n",  # leading zero
        "o\n+1\n{r}\n",
        "o\n-1\n{r}\n",
        "o\n 1\n{r}\n",
        "o\n1 \n{r}\n",
        "o\n18446744073709551616\n{r}\n",  # 2**64
        "o\n1\n{r}",  # no final newline
        "o\n1\n",  # too few lines
        "\n1\n{r}\n",  # empty origin
        "o\n1\n{r}\n\nx\n",  # blank extension line
        "o\n1\nAAAA\n",  # root too short
        "o\n1\n{r_noncanon}\n",
        "o\n1\n{r_nopad}\n",
        "o\n\u0661\n{r}\n",  # non-ASCII digit
    ],
)
def test_checkpoint_body_strictness(body):
    root = bytes(range(32))
    r = base64.b64encode(root).decode()
    r_noncanon = r[:-2] + chr(ord(r[-2]) + 1) + "="  # same bytes decoded, padding bits non-zero
    assert base64.b64decode(r_noncanon) == root
    b = body.format(r=r, r_noncanon=r_noncanon, r_nopad=r.rstrip("="))
    with pytest.raises(MalformedNoteError):
        Checkpoint.parse(b)


def test_checkpoint_field_validation_and_limits():
    root = bytes(32)
    assert Checkpoint.parse(f"o\n{2**64 - 1}\n{base64.b64encode(root).decode()}\n").size == 2**64 - 1
    assert Checkpoint.parse(f"o\n0\n{base64.b64encode(root).decode()}\n").size == 0
    for kwargs in (
        dict(origin="", size=1, root=root),
        dict(origin="a\nb", size=1, root=root),
        dict(origin="o", size=-1, root=root),
        dict(origin="o", size=True, root=root),
        dict(origin="o", size=1, root=root[:31]),
        dict(origin="o", size=1, root=root, extensions=("",)),
        dict(origin="o", size=1, root=root, extensions=("a\nb",)),
    ):
        with pytest.raises(MalformedNoteError) as e:
            Checkpoint(**kwargs)
        assert isinstance(e.value, InvalidParameterError) and e.value.field in ("origin", "size", "root", "extensions")


def test_signer_and_text_validation():
    with pytest.raises(KeyFormatError):
        NoteSigner.generate("has space")
    with pytest.raises(KeyFormatError):
        NoteSigner.generate("has+plus")
    with pytest.raises(KeyFormatError):
        NoteSigner.generate("")
    s = NoteSigner.generate("ok.example/log")
    with pytest.raises(MalformedNoteError):
        sign_note("no final newline", s)
    with pytest.raises(MalformedNoteError):
        sign_note("bad \x07 control\n", s)
    with pytest.raises(MalformedNoteError):
        sign_note("text\n")
    # generated keys round-trip through their string forms
    s2 = NoteSigner.from_skey(s.skey())
    assert s2.vkey() == s.vkey() and NoteVerifier.from_vkey(s.vkey()).verify(b"m", s2.sign(b"m"))
