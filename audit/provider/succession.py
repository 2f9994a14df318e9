"""Continuing a history (spec/protocol.md §3.1): close a window and open its successor over the same corpora."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dprag.errors import InvalidParameterError

from ..protocol import commitments as cm
from ..protocol.encoding import decode, encode
from ..protocol.errors import ServiceStateError
from ..protocol.ledger import NoteSigner
from ..protocol.policy import Policy


def next_window(
    svc: Any,
    directory: str | os.PathLike,
    *,
    policy: Policy,
    add_documents: Mapping[str, Mapping[str, str]] | None = None,
    add_accounts: Mapping[str, tuple[str, str]] | None = None,
    signer: NoteSigner | None = None,
    seed: bytes | None = None,
    embedder_descriptor: cm.EmbedderDescriptor | None = None,
    store: str | None = None,
) -> Any:
    """Close this window and open its successor over the same corpora (spec/protocol.md §3.1): every document's
    spend and every account's counter carry over (committed by C_carry), documents (``add_documents``: tenant ->
    {new id: text}, appended in index order; a new tenant starts empty) and accounts (``add_accounts``) join,
    and ``signer`` rotates the key (the old key's checkpoint covers the close record that names the new
    genesis). ``policy`` must keep the chain constants (``history.chain_violations``). Returns the successor;
    this window refuses every request afterwards. ``store``: where the successor's store is made; by default where
    this window's is (its own SQLite file, or a new schema of the same PostgreSQL database)."""
    from ..protocol.chain import chain_violations, close_record, embedder_violations

    bad = chain_violations(svc.policy, policy)
    if bad:
        raise InvalidParameterError("policy", "changes what a history keeps constant: " + "; ".join(bad))
    earlier = [*((svc.history or {}).get("windows") or []), svc.policy.window]
    if policy.window in earlier:
        raise InvalidParameterError(
            "policy.window", f"{policy.window!r} is already a window of this history (each window has its own id)"
        )
    add_documents = dict(add_documents or {})
    tenants: dict[str, dict[str, str]] = {}
    for t in svc.tenants:
        docs = decode((svc.dir / "docs" / f"{t}.json").read_bytes(), what="documents")
        tenants[t] = dict(zip(docs["ids"], docs["texts"], strict=True))
    for t, new_docs in add_documents.items():
        have = tenants.setdefault(t, {})
        clash = sorted(set(new_docs) & set(have))
        if clash:
            raise InvalidParameterError(
                f"add_documents[{t}]", "ids already in the corpus (documents only join)", clash[:3]
            )
        if not all(isinstance(x, str) for x in new_docs.values()):
            raise InvalidParameterError(f"add_documents[{t}]", "texts must be strings")
        joined = {**have, **new_docs}
        cm.one_text_one_budget(f"add_documents[{t}]", list(joined), list(joined.values()))
        have.update(new_docs)
    svc.refresh_state()
    # the registry carries over with each account's current key; a revoked account does not (and never rejoins)
    accounts = {a: (e.tenant, e.key) for a, e in svc.registry.entries.items() if e.revoked is None}
    gone = {a for a, e in svc.registry.entries.items() if e.revoked is not None}
    for a, spec in (add_accounts or {}).items():
        if a in accounts or a in gone:
            raise InvalidParameterError(
                f"add_accounts[{a}]", "is already registered (accounts only join; a revoked name never rejoins)"
            )
        accounts[a] = spec
    if embedder_descriptor is None:
        schema = {t: len(v) for t, v in tenants.items()}
        if hasattr(svc.embedder, "descriptor"):  # the embedder describes itself: a swapped model is caught below
            embedder_descriptor = svc.embedder.descriptor(
                schema, prompt_template=svc.embedder_descriptor["prompt_template"]
            )
        else:  # a provider's own embedder, described at create(): the committed descriptor with the new schema
            embedder_descriptor = cm.EmbedderDescriptor(**{**svc.embedder_descriptor, "schema": schema})
    bad = embedder_violations(svc.embedder_descriptor, embedder_descriptor.to_dict())
    if bad:
        raise InvalidParameterError("embedder", "changes what a history keeps constant: " + "; ".join(bad))
    with svc.store.write():  # no request is recorded while the window closes: the carry is the ledger's last word
        if svc.is_closed():
            raise _state_error(f"window {svc.policy.window} is already closed")
        size = svc.ledger.size
        counters = {}
        for _pos, body in svc.aud.openings(size):
            signed = json.loads(body)["request"]
            counters[signed["account"]] = max(counters.get(signed["account"], 0), int(signed["counter"]))
        for a, c in svc.carried_counters.items():
            counters[a] = max(counters.get(a, 0), int(c))
        carry = {
            "counters": {a: int(c) for a, c in sorted(counters.items())},
            "spend": {t: [int(x) for x in svc.spent_units(t)] for t in sorted(svc.tenants)},
        }
        history = {
            "chain": svc.chain_id,
            "epoch": svc.epoch + 1,
            "windows": earlier,  # every window of the history so far, oldest first: an id is never reused
            "prev": {"window": svc.policy.window, "size": size, "root": svc.ledger.root(size).hex()},
            "carry": carry,
            "previous_dir": str(svc.dir.resolve()),
            # where the predecessor's store is (no password): a replica on another host materialises it from there
            "previous_store": svc.store.describe(),
        }
        nxt = type(svc).create(
            directory,
            policy=policy,
            embedder=svc.embedder,
            embedder_descriptor=embedder_descriptor,
            generator=svc.committed_generator,
            tenants=tenants,
            accounts=accounts,
            seed=seed,
            signer=signer or svc.signer,
            store=store if store is not None else _same_engine(svc),
            _history=history,
        )
        svc.ledger.append(encode(close_record(nxt.ledger.leaf(0))))
    svc.checkpoint_now()
    return nxt


def _same_engine(svc: Any) -> str | None:
    """The predecessor's database without its schema (the successor gets a schema of its own), or None (SQLite)."""
    if svc.store.dialect != "postgresql":
        return None
    from urllib.parse import quote

    p = svc.store.params
    cred = p["user"] + (":" + quote(p["password"], safe="") if p.get("password") else "")
    url = f"postgresql://{cred}@{p['host']}:{p['port']}/{p['database']}"
    return url + ("?host=" + p["unix_sock"].rsplit("/", 1)[0] if p.get("unix_sock") else "")


def _state_error(msg: str) -> ServiceStateError:
    return ServiceStateError(msg)


def predecessor_directory(svc: Any) -> tuple[Path, str | None]:
    """The directory of ``svc``'s predecessor window on this host, and the store URL to open it with (None: its
    SQLite file, or the URL its directory records). On the host that closed it, ``previous_dir``; elsewhere (a
    replica started from the database URL alone), a PostgreSQL predecessor is materialised from its own schema into
    ``state/previous/`` of this window's directory, with this store's credentials. A SQLite predecessor that is not
    on this host cannot be reached: ``ServiceStateError`` names it."""
    hist = svc.history
    want = hist["prev"]["window"]
    desc = hist.get("previous_store") or {"kind": "sqlite"}
    url = svc.store.url_for(desc["url"]) if desc.get("kind") == "postgresql" and hasattr(svc.store, "url_for") else None
    local = Path(hist["previous_dir"])
    if _holds_window(local, want):
        return local, url
    if url is None:
        raise ServiceStateError(
            f"the predecessor window {want} is not on this host ({local}) and its store is not a PostgreSQL schema "
            "this replica can reach: export the history on the host that holds it"
        )
    from .storage import materialize

    cache = svc.dir / "state" / "previous"
    if not _holds_window(cache, want):
        if cache.exists() or cache.is_symlink():
            raise ServiceStateError(f"{cache} holds another window or a link, not {want}: remove it and export again")
        (svc.dir / "state").mkdir(mode=0o700, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".previous-", dir=svc.dir / "state"))
        try:
            materialize(url, tmp)
            try:
                os.rename(tmp, cache)  # atomic: a concurrent export materialised it first, or this one did
            except OSError:
                if not _holds_window(cache, want):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return cache, url


def _holds_window(d: Path, window: str) -> bool:
    """Whether ``d`` is a service directory (not a link) of the window named ``window``."""
    policy = d / "config" / "policy.json"
    if d.is_symlink() or not policy.is_file():
        return False
    return decode(policy.read_bytes(), what="policy").get("window") == window
