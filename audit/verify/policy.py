"""§8.4 ``policy`` (spec/protocol.md): each epoch's opened policy is well formed and its recomputed claims hold (§4);
the tenants it names are the ones genesis commits, and genesis carries Z_idx exactly for its zk tenants; each
epoch changes only what an epoch may (§3.4: ``chain_violations``, the log's name and the zk tenants kept)."""

from __future__ import annotations

from dprag.errors import DpragError

from ..protocol.chain import chain_violations
from ..protocol.policy import Policy
from .run import Run, guarded


def _check_one(run: Run, policy: Policy) -> None:
    policy.validate().check_claims(epsilon_acc=False)  # epsilon_acc: with the certified ε (verdict.conclude)
    for t in policy.retrieval.enabled_tenants:
        if t not in run.tenants:
            raise DpragError(f"retrieval.enabled_tenants names {t!r}, which genesis does not commit")
    for t, v in run.tenants.items():
        if (v["Z_idx"] is not None) != (t in policy.retrieval.zk_tenants):
            raise DpragError(f"tenant {t!r}: genesis carries Z_idx exactly for the policy's zk tenants")


@guarded("policy")
def check_8_4_policy(run: Run) -> None:
    """§8.4: a policy that breaks a rule is a FAIL and no policy is used further (``run.policy = None``); else
    ``run.policy`` is the last epoch's (what the verdict certifies, over every epoch's: ``verdict``)."""
    if run.policy is None:
        return
    if not run.epochs:  # §8.3 stopped before it read the log's epochs: genesis's alone
        from .run import EpochView

        run.epochs = [EpochView(0, 0, run.policy, run.seed)]
    epochs = run.epochs
    try:
        for ep in epochs:
            if ep.policy is None:
                raise DpragError(f"epoch {ep.number} has no policy that opens its leaf (§8.3)")
            _check_one(run, ep.policy)
        for v in run.tenants.values():
            if v["Z_idx"] is not None:
                from ..protocol.zk_attest import index_commitment

                if int(index_commitment(v["q"], v["zk_blinding"])) != v["Z_idx"]:
                    raise DpragError("a tenant's Z_idx does not commit to the same index as C_idx")
        for a, b in zip(epochs, epochs[1:], strict=False):
            old, new = a.policy, b.policy
            assert old is not None and new is not None  # raised above otherwise
            bad = [x for x in chain_violations(old, new) if not x.startswith("window")]
            if new.window != old.window:
                bad.append("window (an epoch keeps the log's name)")
            if bad:
                raise DpragError(f"epoch {b.number} changes what an epoch may not: " + "; ".join(bad))
        if epochs:
            run.policy = epochs[-1].policy
        run.ok("policy", max(1, len(epochs)))
    except DpragError as e:
        run.fail("policy", str(e))
        run.policy = None
