"""``dprag account ...``: an account's side of the protocol from the command line (spec/protocol.md §5.1, §5.4).

An account keeps a directory: ``account.key`` (its Ed25519 seed, 0600), ``account.vkey`` (what the provider
registers in genesis), ``config.json`` (account, window, the provider's pinned note key), ``counter``,
``pending/<counter>.json`` (requests sent, awaiting their receipt) and ``receipts.jsonl`` (receipts checked
and kept). The request travels to the provider as one JSON object; the provider's answer comes back as one
JSON object ``{"answer", "citations", "receipt", "pos"}`` (``ServedQuery.to_dict``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from dprag.errors import DpragError

from ..client.account import AccountClient, ReceiptError
from ..protocol.encoding import encode, loads_bounded
from ..protocol.request import AccountKey, Request


def account_client(d: Path, embedder: object = None) -> AccountClient:
    """The account of directory ``d``; ``embedder``: one already loaded (the agent's), else the one config names."""
    try:
        cfg = loads_bounded((d / "config.json").read_bytes(), what="config.json")
        key = AccountKey.from_hex((d / "account.key").read_text())
    except (OSError, ValueError, DpragError) as e:
        raise click.UsageError(f"ACCOUNT_DIR {d}: not an account directory ({e})") from None
    if embedder is None and cfg.get(
        "embedder"
    ):  # the account computes Q itself with the committed embedder (protocol §5.1)
        from ..provider import models as serving_models

        try:
            embedder = serving_models.load_embedder(cfg["embedder"])
        except DpragError as e:
            raise click.UsageError(f"--embedder {cfg['embedder']}: {e}") from None
    return AccountClient(
        cfg["account"],
        cfg["window"],
        key,
        provider_vkey=cfg.get("provider_key"),
        origin=cfg.get("origin"),
        directory=d,
        embedder=embedder,
        embedding_scale=int(cfg.get("embedding_scale") or 1024),
    )


@click.group("account")
def account() -> None:
    """An account's client: keys, signed requests, receipts."""


@account.command("new")
@click.argument("account_dir", type=click.Path(path_type=Path))
@click.option("--account", "name", required=True, help="the account id the provider registers")
@click.option("--window", required=True, help="the audit window's id")
@click.option(
    "--provider-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="file with the provider's note verifier key (pins it: receipts are checked against it)",
)
@click.option(
    "--origin",
    default=None,
    help="the log's origin, dprag/<chain id> (GET /v1/info, or the provider out of band): pinned with the key, "
    "every receipt must name it; `account ask` sends nothing until both are pinned",
)
@click.option(
    "--embedder",
    "embedder",
    default="all-MiniLM-L6-v2",
    show_default=True,
    help="the committed embedder by name (a dprag.embedders entry point): the account computes and commits to its "
    "query embedding Q itself, so the provider cannot substitute another",
)
@click.option(
    "--q-on-trust",
    is_flag=True,
    help="do not compute Q: the provider computes it and the verdict counts every such query as Q on trust",
)
@click.option(
    "--embedding-scale",
    type=int,
    default=1024,
    show_default=True,
    help="the window's quantisation scale S (the embedder descriptor's embedding_scale)",
)
def new_cmd(
    account_dir: Path,
    name: str,
    window: str,
    provider_key: Path | None,
    origin: str | None,
    embedder: str | None,
    q_on_trust: bool,
    embedding_scale: int,
) -> int:
    """Create an account directory with a fresh key; print the public key to register. By default the account
    commits to Q with the committed embedder (--q-on-trust: leave Q to the provider, counted on trust)."""
    if q_on_trust:
        embedder = None
        click.echo("warning: --q-on-trust: the provider computes Q for every request of this account", err=True)
    if embedder is not None:
        from ..provider import models as serving_models

        try:
            serving_models.embedder_loader(embedder)  # the name must resolve; the model loads when a request is signed
        except DpragError as e:
            raise click.UsageError(f"--embedder {embedder}: {e}") from None
    if origin is not None:
        cid = origin[len("dprag/") :] if origin.startswith("dprag/") else origin
        if len(cid) != 64 or any(c not in "0123456789abcdef" for c in cid):
            raise click.UsageError(f"--origin {origin[:80]}: must be dprag/<chain id> (64 lower-case hex characters)")
        origin = "dprag/" + cid
    if embedding_scale < 1 or embedding_scale & (embedding_scale - 1):
        raise click.UsageError(f"--embedding-scale {embedding_scale}: must be a power of two")
    if (account_dir / "account.key").exists():
        raise click.UsageError(f"ACCOUNT_DIR {account_dir}: already holds an account key")
    account_dir.mkdir(parents=True, exist_ok=True)
    key = AccountKey.generate()
    fd = os.open(account_dir / "account.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.to_hex() + "\n")
    (account_dir / "account.vkey").write_text(key.vkey + "\n")
    vkey = provider_key.read_text().strip() if provider_key else None
    cfg = {"account": name, "window": window, "provider_key": vkey, "origin": origin}
    if embedder is not None:
        cfg.update(embedder=embedder, embedding_scale=embedding_scale)
    (account_dir / "config.json").write_text(json.dumps(cfg, sort_keys=True) + "\n")
    click.echo(key.vkey)
    return 0


@account.command("request")
@click.argument("account_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("question")
def request_cmd(account_dir: Path, question: str) -> int:
    """Sign the next request for QUESTION; print it (one JSON object) for the provider, keep it pending."""
    c = account_client(account_dir)
    req = c.request(question)
    body = req.to_json()
    (account_dir / "pending").mkdir(exist_ok=True)
    (account_dir / "pending" / f"{req.signed['counter']}.json").write_bytes(encode(body))
    click.echo(encode(body).decode())
    return 0


@account.command("check-receipt")
@click.argument("account_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("response", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check_receipt_cmd(account_dir: Path, response: Path) -> int:
    """Check the provider's RESPONSE (JSON: answer, citations, receipt, and the consistency proof from this account's
    last receipt, ProviderService.consistency) against the pending request it answers and the receipts kept before;
    keep the receipt. Exit 0 accepted, 1 rejected (the reason on stdout; kept in incidents.jsonl), 2 unusable input."""
    c = account_client(account_dir)
    try:
        resp = loads_bounded(response.read_bytes(), what="RESPONSE")
        counter = resp["receipt"]["counter"]
        pending = account_dir / "pending" / f"{int(counter)}.json"
        pend = loads_bounded(pending.read_bytes(), what=str(pending))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise click.UsageError(f"RESPONSE {response}: not a response to a pending request ({e})") from None
    req = Request(pend["request"], pend["question"], None if pend["qemb"] is None else bytes.fromhex(pend["qemb"]))
    try:
        proof = None
        if resp.get("consistency") is not None:
            from ..protocol.ledger.proof import ConsistencyProof

            proof = ConsistencyProof.from_json_dict(resp["consistency"])
        c.accept(req, resp["receipt"], resp.get("citations"), answer=resp.get("answer"), consistency=proof)
    except (ReceiptError, DpragError) as e:
        click.echo(f"REJECTED {e}")
        return 1
    (account_dir / "pending" / f"{int(counter)}.json").unlink()
    click.echo(f"ACCEPTED counter {counter} at ledger position {resp['receipt']['pos']}")
    return 0


@account.command("resend")
@click.argument("account_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("counter", type=int)
def resend_cmd(account_dir: Path, counter: int) -> int:
    """Print the signed request of COUNTER again, byte for byte, for the provider (``dprag account ask`` also resends
    every pending request itself before it signs a new one): a retry returns the stored answer
    (or finishes a request charged before a failure) and spends nothing new. A client never signs two requests for one
    counter, except after the provider's signed refusal (which says the counter was not consumed). A request the
    provider voided (its signed void kept in refusals.jsonl: recorded, never to be answered) has nothing to resend:
    exit 1 naming the void, and the next ask signs the next counter."""
    void = _voided(account_dir).get(counter)
    if void is not None:
        click.echo(f"VOIDED request {counter}: {void.get('rule')} (the provider's signed void is kept)", err=True)
        return 1
    for p in (account_dir / "pending" / f"{counter}.json", account_dir / "sent" / f"{counter}.json"):
        try:  # pending/: signed by `account request`; sent/: the client's durable copy of every request it signed
            data = p.read_bytes()
            break
        except OSError:
            continue
    else:
        raise click.UsageError(f"COUNTER {counter}: this account signed no request with it") from None
    click.echo(data.decode())  # both hold the request as `account request` prints it (Request.to_json)
    return 0


def _voided(account_dir: Path) -> dict[int, dict[str, object]]:
    """The account's voided requests (signed voids kept in refusals.jsonl): counter -> the void."""
    path = account_dir / "refusals.jsonl"
    out: dict[int, dict[str, object]] = {}
    if path.is_file():
        for i, line in enumerate(path.read_bytes().splitlines(), 1):
            e = loads_bounded(line, what=f"{path} line {i}") if line.strip() else None
            if isinstance(e, dict) and isinstance(e.get("refusal"), dict) and e["refusal"].get("code") == "void":
                out[int(e["request"]["counter"])] = e["refusal"]
    return out


@account.command("follow")
@click.argument("account_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--url", "urls", required=True, multiple=True, help="the provider's dprag serve URL")
def follow_cmd(account_dir: Path, urls: tuple[str, ...]) -> int:
    """Follow the provider's key rotations (GET /v1/keys) from the key this account pinned: each proof must open
    under the key before it (the rotation leaf's inclusion under a checkpoint both keys signed); the keys followed
    are kept. Prints the key now trusted. (`account ask` also follows when a receipt names a newer key.)"""
    from ..client.remote import RemoteError, RemoteService

    c = account_client(account_dir)
    if c.provider_vkey is None:
        raise click.UsageError(f"ACCOUNT_DIR {account_dir}: no provider key pinned to follow from (account new)")
    try:
        n = c.follow_rotations(RemoteService(list(urls), account=c.account, key=c.key).key_history())
    except ReceiptError as e:
        click.echo(f"REJECTED {e}", err=True)
        return 1
    except (RemoteError, DpragError) as e:
        raise click.UsageError(f"--url: {e}") from None
    click.echo(json.dumps({"followed": n, "provider_key": c.provider_vkey}, sort_keys=True))
    return 0


@account.command("export-receipts")
@click.argument("account_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--include-questions", is_flag=True, help="also the question texts (lets the auditor replay answers)")
def export_cmd(account_dir: Path, out: Path, include_questions: bool) -> int:
    """Write the kept receipts as JSONL for the auditor (dprag audit verify --receipts OUT)."""
    c = account_client(account_dir)
    c.export_receipts(out, include_questions=include_questions)
    click.echo(f"{len(c.receipts)} receipts -> {out}")
    return 0


@account.command("agent")
@click.argument("account_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def agent_cmd(account_dir: Path) -> int:
    """Keep this account's embedder loaded and answer `dprag account ask ACCOUNT_DIR` on ACCOUNT_DIR/agent.sock
    (a Unix socket of mode 0600), so an ask no longer loads the model; runs until interrupted."""
    from .account_agent import serve_agent, socket_path

    click.echo(f"dprag account agent: {socket_path(account_dir)}", err=True)
    try:
        serve_agent(account_dir, account_client, ask_once)
    except OSError as e:
        raise click.UsageError(str(e)) from None
    except KeyboardInterrupt:
        pass
    return 0


@account.command("ask")
@click.argument("account_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("question")
@click.option(
    "--url",
    "urls",
    required=True,
    multiple=True,
    help="the provider's dprag serve URL (repeat for replicas: a request the first cannot answer goes to the next)",
)
@click.option("--attempts", type=click.IntRange(1, 100), default=8, show_default=True)
def ask_cmd(account_dir: Path, question: str, urls: tuple[str, ...], attempts: int) -> int:
    """Sign the next request for QUESTION, send it over HTTP (resending the same signed bytes while the service is
    unavailable), check the answer, the citations and the receipt, keep the receipt; print the answer as one JSON
    object. Exit 0 answered, 1 refused or rejected (the reason on stderr), 2 unusable input."""
    from .account_agent import ask_via_agent

    via = ask_via_agent(account_dir, question, list(urls), attempts)
    if via is not None:  # the account's agent (dprag account agent DIR) holds the embedder loaded: it asked
        code, out, err = via
    else:
        code, out, err = ask_once(account_client(account_dir), account_dir, question, list(urls), attempts)
    if code == 2:
        raise click.UsageError(err)
    if err:
        click.echo(err, err=True)
    if out:
        click.echo(out)
    return code


def ask_once(
    c: AccountClient, account_dir: Path, question: str, urls: list[str], attempts: int
) -> tuple[int, str, str]:
    """One ``dprag account ask`` with the client ``c``: (exit code, stdout line, stderr line). Shared by the command
    and the account's agent (``account_agent``), which keeps ``c``'s embedder loaded between asks."""
    from ..client.remote import RemoteError, RemoteService

    if c.provider_vkey is None or c.origin is None:  # refused before anything is signed, sent or charged
        missing = " and ".join(x for x, v in (("key", c.provider_vkey), ("origin", c.origin)) if v is None)
        return (
            2,
            "",
            f"ACCOUNT_DIR {account_dir}: the provider's {missing} is not pinned: nothing was signed or sent (dprag "
            "account new --provider-key FILE --origin dprag/ID pins both; receipts are checked against them)",
        )
    try:
        remote = RemoteService(urls, account=c.account, key=c.key, attempts=attempts)
    except DpragError as e:
        return 2, "", f"--url: {e}"
    voided = c.voided()
    try:
        served = c.ask(remote, question)
    except ReceiptError as e:
        return 1, "", f"REJECTED {e}"
    except RemoteError as e:
        return 1, "", f"ERROR {e}"
    except DpragError as e:  # a refusal (kept with its signature in refusals.jsonl) or the service unreachable
        return 1, "", f"REFUSED {type(e).__name__}: {e}"
    out = {"answer": served.answer, "citations": served.citations, "pos": served.pos, "retries": remote.retries}
    news = sorted(set(c.voided()) - set(voided))
    note = "; ".join(
        f"VOIDED request {n} (recorded, never to be answered: the provider's signed void is kept)" for n in news
    )
    return 0, json.dumps(out, sort_keys=True), note
