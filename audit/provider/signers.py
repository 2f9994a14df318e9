"""Where the provider's signing key lives (spec/provider.md §8): ``Signer`` backends and ``load_signer(spec)``.

- ``FileSigner(path)``: the note key (``PRIVATE+KEY+...``, Go ``note`` format) in a file of its own, outside the
  window's directory and the store. The file must be a regular file (not a symbolic link) that only its owner can
  read or write (mode 0600 or stricter): anything else is refused naming the path and the rule.
- ``Pkcs11Signer``: the key inside a PKCS#11 token (an HSM, a cloud KMS's PKCS#11 library, SoftHSM2), signing with
  ``CKM_EDDSA`` (pure Ed25519, RFC 8032). The seed never leaves the token; the optional extra ``pkcs11``
  (python-pkcs11, MIT) provides the binding.

Both are deterministic RFC 8032 Ed25519: the same key signs the same bytes identically whichever backend holds it,
so replicas write identical notes. ``load_signer`` reads an operator's spec: ``file:PATH`` or an RFC 7512 PKCS#11
URI ``pkcs11:token=LABEL;object=KEYLABEL?module-path=/path/to/lib.so&pin-source=file:/path`` (the PIN from
``pin-source``, else ``pin-value``, else the environment variable ``DPRAG_PKCS11_PIN``; ``x-key-name`` sets the note
key's name, default the object label).
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import TypeGuard, cast
from urllib.parse import unquote

from dprag.errors import InvalidParameterError

from ..protocol.ledger import NoteSigner, Signer
from ..protocol.ledger.errors import KeyFormatError
from ..protocol.signer import ExternalSigner, SignerError

__all__ = [
    "held_in_window",
    "FileSigner",
    "Pkcs11Signer",
    "load_signer",
    "pkcs11_import_key",
    "write_key_file",
    "PIN_ENV",
]

PIN_ENV = "DPRAG_PKCS11_PIN"


def held_in_window(signer: object) -> TypeGuard[NoteSigner]:
    """Whether ``signer`` is a key held in memory only (a plain ``NoteSigner``), which the window keeps in
    ``secret/provider.skey`` and its store; a file or token signer keeps its key where it is."""
    return type(signer) is NoteSigner


def _check_key_file(path: Path) -> None:
    """A key file is a regular file, not a link, readable and writable by its owner only."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InvalidParameterError("signer", f"{path}: no such key file") from None
    if stat.S_ISLNK(st.st_mode):
        raise InvalidParameterError(
            "signer", f"{path}: is a symbolic link; the key file must be a regular file of mode 0600 (not a link)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise InvalidParameterError("signer", f"{path}: is not a regular file; the key file must be one of mode 0600")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise InvalidParameterError(
            "signer",
            f"{path}: has mode {mode:04o}, readable or writable by group or others; the key file must be mode 0600 "
            f"(chmod 600 {path})",
        )


class FileSigner(NoteSigner):
    """The note key read from ``path`` (see module docstring); a ``NoteSigner`` once loaded."""

    __slots__ = ("path",)

    def __init__(self, path: str | os.PathLike[str]):
        p = Path(path)
        _check_key_file(p)
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)  # a link planted between the check and the open is refused
        with os.fdopen(fd, "rb") as f:
            if stat.S_IMODE(os.fstat(f.fileno()).st_mode) & 0o077:
                raise InvalidParameterError("signer", f"{p}: mode changed to group/other access; must be 0600")
            text = f.read().decode("utf-8", "replace").strip()
        try:
            key = NoteSigner.from_skey(text)
        except KeyFormatError as e:
            raise InvalidParameterError(
                "signer", f"{p}: not a note signer key PRIVATE+KEY+<name>+<hash>+<key> ({e})"
            ) from None
        super().__init__(key.name, _seed_of(key))
        self.path = p

    def __repr__(self) -> str:
        return f"FileSigner({str(self.path)!r}, vkey={self.vkey()!r})"


def _seed_of(key: NoteSigner) -> bytes:
    """The 32-byte seed a note key string holds (its last field: base64 of 0x01 || seed)."""
    import base64

    return base64.b64decode(key.skey().split("+", 4)[4])[1:]


def write_key_file(path: str | os.PathLike[str], key: NoteSigner) -> Path:
    """Write ``key`` to the new file ``path``, mode 0600 (created exclusively; an existing file or link is refused)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise InvalidParameterError("signer", f"{p}: already exists (a key file is never overwritten)") from None
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write((key.skey() + "\n").encode())
        f.flush()
        os.fsync(f.fileno())
    return p


class Pkcs11Signer(ExternalSigner):
    """An Ed25519 key in a PKCS#11 token: ``module`` (the token's library), the token's label, the key's label
    (``CKA_LABEL`` of the private key and of its public key), the user PIN. ``name``: the note key's name (default:
    the key's label). Needs the ``pkcs11`` extra (python-pkcs11)."""

    def __init__(self, module: str, token: str, key: str, pin: str, *, name: str | None = None):
        try:
            import pkcs11
            from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass
            from pkcs11.types import SignMixin
        except ImportError:
            raise InvalidParameterError("signer", "pkcs11: needs python-pkcs11 (pip install 'dprag[pkcs11]')") from None
        try:
            lib = pkcs11.lib(module)
            tok = lib.get_token(token_label=token)
            self._session = tok.open(user_pin=pin)
            priv = self._session.get_key(object_class=ObjectClass.PRIVATE_KEY, key_type=KeyType.EC_EDWARDS, label=key)
            if not isinstance(priv, SignMixin):
                raise InvalidParameterError("signer", f"pkcs11: the key {key!r} cannot sign")
            sign_with = cast(SignMixin, priv).sign
            pub = self._session.get_key(object_class=ObjectClass.PUBLIC_KEY, key_type=KeyType.EC_EDWARDS, label=key)
            point = bytes(pub[Attribute.EC_POINT])
        except InvalidParameterError:
            raise
        except Exception as e:  # noqa: BLE001 - python-pkcs11's errors (no token, wrong PIN, no such key)
            raise InvalidParameterError(
                "signer", f"pkcs11: token {token!r}, key {key!r} in {module}: {type(e).__name__} {e}".rstrip()
            ) from None
        mech = Mechanism.EDDSA
        lock = threading.Lock()  # one operation at a time on a PKCS#11 session

        def sign_raw(message: bytes) -> bytes:
            with lock:
                return bytes(sign_with(message, mechanism=mech))

        super().__init__(name or key, _raw_point(point), sign_raw, what=f"pkcs11:{token}/{key}")

    def close(self) -> None:
        self._session.close()


def pkcs11_import_key(module: str, token: str, pin: str, label: str, key: NoteSigner) -> None:
    """Import ``key`` (its 32-byte seed) into the token as a non-extractable, sensitive Ed25519 private key and its
    public key, both labelled ``label``: to move a file key into a token (then delete the file), or to test that the
    token signs exactly as the file did. Keys generated inside the token never leave it; this one was outside."""
    import pkcs11
    from pkcs11 import Attribute, KeyType, ObjectClass
    from pkcs11.util.ec import encode_named_curve_parameters

    params = encode_named_curve_parameters("1.3.101.112")  # id-Ed25519 (RFC 8410)
    with pkcs11.lib(module).get_token(token_label=token).open(user_pin=pin, rw=True) as s:
        s.create_object(
            {
                Attribute.CLASS: ObjectClass.PRIVATE_KEY,
                Attribute.KEY_TYPE: KeyType.EC_EDWARDS,
                Attribute.EC_PARAMS: params,
                Attribute.VALUE: _seed_of(key),
                Attribute.LABEL: label,
                Attribute.TOKEN: True,
                Attribute.PRIVATE: True,
                Attribute.SENSITIVE: True,
                Attribute.EXTRACTABLE: False,
                Attribute.SIGN: True,
            }
        )
        s.create_object(
            {
                Attribute.CLASS: ObjectClass.PUBLIC_KEY,
                Attribute.KEY_TYPE: KeyType.EC_EDWARDS,
                Attribute.EC_PARAMS: params,
                Attribute.EC_POINT: bytes([0x04, 32]) + key.public_key,
                Attribute.LABEL: label,
                Attribute.TOKEN: True,
                Attribute.VERIFY: True,
            }
        )


def _raw_point(point: bytes) -> bytes:
    """CKA_EC_POINT of an Ed25519 key: the 32 raw bytes, or a DER OCTET STRING holding them (tokens differ)."""
    if len(point) == 34 and point[0] == 0x04 and point[1] == 32:
        return point[2:]
    if len(point) == 32:
        return point
    raise SignerError("pkcs11", f"the public key's CKA_EC_POINT is not an Ed25519 point ({len(point)} bytes)")


def _pkcs11_uri(spec: str) -> dict[str, str]:
    """The attributes of an RFC 7512 URI ``pkcs11:path-attrs?query-attrs`` (percent-decoded)."""
    body = spec[len("pkcs11:") :]
    path, _, query = body.partition("?")
    out: dict[str, str] = {}
    for part in [p for p in path.split(";") if p] + [q for q in query.split("&") if q]:
        k, sep, v = part.partition("=")
        if not sep:
            raise InvalidParameterError("signer", f"pkcs11 URI attribute {k!r} has no value (name=value)")
        out[k] = unquote(v)
    return out


def load_signer(spec: str, *, environ: dict[str, str] | None = None) -> Signer:
    """The signer an operator names (``--signer``): ``file:PATH`` or ``pkcs11:...`` (module docstring)."""
    env = os.environ if environ is None else environ
    if not isinstance(spec, str):
        raise InvalidParameterError("signer", "must be file:PATH or a pkcs11: URI", spec)
    if spec.startswith("file:"):
        return FileSigner(spec[len("file:") :])
    if spec.startswith("pkcs11:"):
        a = _pkcs11_uri(spec)
        for need in ("module-path", "token", "object"):
            if need not in a:
                raise InvalidParameterError("signer", f"the pkcs11 URI needs {need}= (RFC 7512)")
        pin = a.get("pin-value")
        if "pin-source" in a:
            src = a["pin-source"].removeprefix("file:")
            try:
                pin = Path(src).read_text().strip()
            except OSError as e:
                raise InvalidParameterError("signer", f"pin-source {src}: cannot be read ({e.strerror})") from None
        pin = pin if pin is not None else env.get(PIN_ENV)
        if pin is None:
            raise InvalidParameterError("signer", f"the pkcs11 token needs a PIN: pin-source=file:PATH or ${PIN_ENV}")
        return Pkcs11Signer(a["module-path"], a["token"], a["object"], pin, name=a.get("x-key-name"))
    raise InvalidParameterError("signer", "must be file:PATH or a pkcs11: URI (RFC 7512)", spec)
