"""The account registry of a log (spec/protocol.md §3.2): what every party computes alike about who may ask.

Genesis registers the first accounts; later ones join by an ``account`` leaf anywhere in the log. A name keeps its
tenant for the log's life and its key until the account itself signs a rotation (an ``account-key`` leaf carrying
its signature under the key it replaces); an ``account-revoke`` leaf ends a name for good (it never rejoins, its
earlier receipts stay evidence, a request of it at a later size is refused, code ``revoked``). A key belongs to
one account, ever: a key once registered (current or rotated out) is never registered again, so no party holds
two accounts' counters.

Leaves (canonical JSON, public like genesis's registry):

- ``{"type": "account", "account", "tenant", "key"}``
- ``{"type": "account-key", "account", "key", "sig"}``: ``sig`` = Ed25519 under the account's current key of
  ``"dprag/account-key/v4\\n" || canonical({"chain", "account", "old", "new"})`` (``chain``: the log's chain id)
- ``{"type": "account-revoke", "account"}``

``Registry.apply(pos, record)`` is the one rule: the provider runs it before it appends such a leaf, the verifier
on each one it reads; both get the same ``RegistryError`` naming the rule a leaf breaks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from dprag.errors import DpragError

from .encoding import EncodingError, encode, hexbytes, is_identifier

ACCOUNT_KEY_DOMAIN = b"dprag/account-key/v4\n"
#: the leaf types this module rules on
TYPES = ("account", "account-key", "account-revoke")
_FIELDS = {
    "account": {"type", "account", "tenant", "key"},
    "account-key": {"type", "account", "key", "sig"},
    "account-revoke": {"type", "account"},
}


class RegistryError(DpragError):
    """A registry leaf that breaks a rule (``field``: what it names; ``rule``: the rule)."""

    def __init__(self, field: str, rule: str):
        super().__init__(f"{field}: {rule}")
        self.field, self.rule = field, rule


@dataclass
class AccountEntry:
    """One account: its tenant (for the log's life), its keys with the position each took effect at (the
    genesis key at 0), where it joined, and where it was revoked (None: active)."""

    tenant: str
    keys: list[tuple[int, str]]
    joined: int
    revoked: int | None = None

    @property
    def key(self) -> str:
        """The current key."""
        return self.keys[-1][1]

    def key_at(self, pos: int) -> str:
        """The key in effect for a leaf at ``pos`` (the last one that took effect below it)."""
        k = self.keys[0][1]
        for at, key in self.keys:
            if at < pos:
                k = key
        return k

    def active_at(self, pos: int) -> bool:
        """Whether a request may sit at ``pos``: after the account joined and not after its revocation."""
        return self.joined < pos and (self.revoked is None or pos < self.revoked)


def account_key_message(chain: str, account: str, old: str, new: str) -> bytes:
    """What an account signs to rotate its key (bound to the log, the name and both keys)."""
    return ACCOUNT_KEY_DOMAIN + encode({"chain": chain, "account": account, "old": old, "new": new})


def account_leaf(account: str, tenant: str, key: str) -> dict[str, Any]:
    return {"type": "account", "account": account, "tenant": tenant, "key": key}


def revoke_leaf(account: str) -> dict[str, Any]:
    return {"type": "account-revoke", "account": account}


def account_key_leaf(signer: Any, chain: str, account: str, new: str) -> dict[str, Any]:
    """The rotation leaf, signed by ``signer`` (the account's current ``AccountKey``)."""
    sig = signer.sign(account_key_message(chain, account, signer.vkey, new)).hex()
    return {"type": "account-key", "account": account, "key": new, "sig": sig}


@dataclass
class Registry:
    """Every account of a log, by name; ``keys_seen``: every key ever registered (one key, one account)."""

    chain: str
    entries: dict[str, AccountEntry] = field(default_factory=dict)
    keys_seen: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_genesis(cls, chain: str, accounts: Mapping[str, tuple[str, str]]) -> Registry:
        reg = cls(chain)
        for a, (t, k) in accounts.items():
            reg.entries[a] = AccountEntry(t, [(0, k)], 0)
            reg.keys_seen[k] = a
        return reg

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __getitem__(self, name: str) -> AccountEntry:
        return self.entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, name: str) -> AccountEntry | None:
        return self.entries.get(name)

    def apply(self, pos: int, rec: Any, tenants: Any = ()) -> None:
        """Apply the registry leaf ``rec`` at ledger position ``pos``, or raise ``RegistryError`` naming the rule it
        breaks (the registry is unchanged then). ``tenants``: the log's tenants at ``pos``."""
        if not isinstance(rec, dict) or rec.get("type") not in TYPES or set(rec) != _FIELDS[rec["type"]]:
            raise RegistryError("leaf", f"must be one of the registry leaves with exactly the fields of {TYPES}")
        kind, name = rec["type"], rec["account"]
        if not isinstance(name, str) or not is_identifier(name):
            raise RegistryError("account", "must be an identifier")
        entry = self.entries.get(name)
        if kind == "account":
            if entry is not None:
                raise RegistryError(
                    "account",
                    f"{name!r} is already registered (a name joins once"
                    + (", and a revoked name never rejoins)" if entry.revoked is not None else ")"),
                )
            if rec["tenant"] not in tenants:
                raise RegistryError("tenant", f"{rec['tenant']!r} is not a tenant of this log")
            key = self._fresh_key(rec["key"])
            self.entries[name] = AccountEntry(rec["tenant"], [(pos, key)], pos)
            self.keys_seen[key] = name
            return
        if entry is None:
            raise RegistryError("account", f"{name!r} is not registered")
        if entry.revoked is not None:
            raise RegistryError("account", f"{name!r} was revoked at leaf {entry.revoked}")
        if kind == "account-revoke":
            entry.revoked = pos
            return
        key = self._fresh_key(rec["key"])
        try:
            sig = hexbytes(rec["sig"], "sig", 64)
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(entry.key)).verify(
                sig, account_key_message(self.chain, name, entry.key, key)
            )
        except (EncodingError, InvalidSignature, ValueError):
            raise RegistryError(
                "sig", f"is not the signature of {name!r} under its current key (an account rotates its own key)"
            ) from None
        entry.keys.append((pos, key))
        self.keys_seen[key] = name

    def _fresh_key(self, key: Any) -> str:
        try:
            hexbytes(key, "key", 32)
        except EncodingError:
            raise RegistryError("key", "must be 64 hex characters (an Ed25519 public key)") from None
        if key in self.keys_seen:
            raise RegistryError(
                "key", f"is already registered to {self.keys_seen[key]!r} (one key, one account, for the log's life)"
            )
        return str(key)
