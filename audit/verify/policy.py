"""§8.4 ``policy`` (spec/protocol.md): the opened policy is well formed and its recomputed claims hold (§4); the
tenants it names are the ones genesis commits, and genesis carries Z_idx exactly for its zk tenants."""

from __future__ import annotations

from dprag.errors import DpragError

from .run import Run, guarded


@guarded("policy")
def check_8_4_policy(run: Run) -> None:
    """§8.4: a policy that breaks a rule is a FAIL and is not used further (``run.policy = None``)."""
    if run.policy is None:
        return
    try:
        run.policy.validate().check_claims(epsilon_acc=False)  # epsilon_acc: with the certified ε (verdict.conclude)
        for t in run.policy.retrieval.enabled_tenants:
            if t not in run.tenants:
                raise DpragError(f"retrieval.enabled_tenants names {t!r}, which genesis does not commit")
        for t, v in run.tenants.items():
            if (v["Z_idx"] is not None) != (t in run.policy.retrieval.zk_tenants):
                raise DpragError(f"tenant {t!r}: genesis carries Z_idx exactly for the policy's zk tenants")
            if v["Z_idx"] is not None:
                from ..protocol.zk_attest import index_commitment

                if int(index_commitment(v["q"], v["zk_blinding"])) != v["Z_idx"]:
                    raise DpragError(f"tenant {t!r}: Z_idx does not commit to the same index as C_idx")
        run.ok("policy")
    except DpragError as e:
        run.fail("policy", str(e))
        run.policy = None
