"""``dprag experiment coalition-probe`` (lab/experiments/coalition_probe.py): the per-channel events,
the bounds against independent computations, a leaky service configuration where both channels must leak
the target (and never the replaced record), and the CLI's bad-input path."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from dprag.accounting import gdp
from dprag.accounting.collusion import lemma_3_11_advantage_upper
from dprag.audit.cli import main
from dprag.audit.protocol.certify import certified_epsilons
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.lab.experiments import coalition_probe as cp


def test_wilson_closed_forms():
    z = 1.959963984540054
    lo, hi = cp.wilson(0, 20)
    assert lo == 0.0 and hi == pytest.approx(z * z / (20 + z * z))  # Wilson upper limit at 0 successes
    lo, hi = cp.wilson(10, 20)
    assert lo + hi == pytest.approx(1.0)  # symmetric around 1/2
    lo, hi = cp.wilson(20, 20)
    assert hi == 1.0 and lo == pytest.approx(20 / (20 + z * z))


def test_events_are_cumulative_over_accounts():
    acc = [
        [{"answer": "no", "citations": [3, 4]}],
        [{"answer": "it is 123456", "citations": [7, 8]}],
        [{"answer": "no", "citations": [7, 1]}],
    ]
    ev = cp.events(acc, 7, "123456")
    assert ev == {"citations": [False, True, True], "answers": [False, True, True]}


def test_summary_bounds_match_accounting():
    pol = cp.probe_policy(4, 2)
    trials = []
    for _i in range(10):  # in: citations from k = 2 on in every trial; out: never; answers never
        trials.append({"world": "in", "events": {"citations": [False, True, True, True], "answers": [False] * 4}})
        trials.append({"world": "out", "events": {"citations": [False] * 4, "answers": [False] * 4}})
    rows = cp.summarise(trials, range(1, 5), pol, 2)
    r = pol.retrieval
    gen = certified_epsilons(pol)["generation"]["epsilon"]
    z = 1.959963984540054
    p_out_hi = z * z / (10 + z * z)
    for row in rows:
        k = row["k"]
        if row["channel"] == "citations":
            want = gdp.discrete_gaussian_epsilon(
                r.sigma, r.sensitivity, 2 * k, pol.coalition.delta_policy, sampler_tv=r.sampler.tv
            ).epsilon
            assert row["epsilon"] == pytest.approx(want)
            assert row["p_in"] == (0.0 if k == 1 else 1.0) and row["p_out"] == 0.0
        else:
            assert row["epsilon"] == pytest.approx(gen)  # the global filter: k does not enter
            want_prior = min(1.0, math.exp(gen) * k * 2 * pol.generation.max_tokens / 1e6 + row["delta"])
            assert row["rate_bound_prior"] == pytest.approx(want_prior)
        assert row["rate_bound"] == pytest.approx(min(1.0, math.exp(row["epsilon"]) * p_out_hi + row["delta"]))
        assert row["advantage_bound"] == pytest.approx(lemma_3_11_advantage_upper(row["epsilon"], row["delta"]))
    eps_c = [row["epsilon"] for row in rows if row["channel"] == "citations"]
    assert all(a < b for a, b in zip(eps_c, eps_c[1:], strict=False))  # more colluders, more retrieval ε


class NameEmbedder(HashEmbedder):
    """Bag of hashed capitalised words except sentence openers, normalised: a probe naming a patient retrieves
    that patient's record (a test double for MiniLM)."""

    STOP = {
        "What",
        "Tell",
        "Please",
        "Clinic",
        "Patient",
        "Visit",
        "Seen",
        "Private",
        "Confidential",
        "Note",
        "Plan",
        "Symptoms",
        "Assessment",
        "Following",
        "Treated",
        "Management",
        "Discharged",
        "As",
        "The",
        "Noted",
        "Follow",
        "Under",
    }

    def embed(self, texts):
        out = np.zeros((len(texts), self.dimension))
        for i, t in enumerate(texts):
            for w in re.findall(r"\b[A-Z][a-z]+\b", t):
                if w not in self.STOP:
                    out[i] += self._word(w)
            n = np.linalg.norm(out[i])
            out[i] = out[i] / n if n > 0 else out[i]
        return out


class SecretCopy(ToyGenerator):
    """A leaky 'LLM': a voter whose document holds a 6-digit number says that number."""

    def plan(self, prompt):
        for c in prompt.contexts:
            m = re.search(r"\b(\d{6})\b", c)
            if m:
                return [self._tok(m.group(1)), 0]
        return super().plan(prompt)


class _Models:
    def __init__(self):
        self.embedder = NameEmbedder(256)
        self.generator = SecretCopy(vocab_size=4096)
        self.names = {"embedder": "test", "generator": "test"}

    def descriptor(self, schema):
        return self.embedder.descriptor(dict(schema))


def test_leaky_service_leaks_the_target_and_never_the_replacement(tmp_path):
    """ε_acc = ε_token = 50, one voter, τ = 0: both channels reveal the target in the 'in' world; in the 'out'
    world the target's id holds another patient, so the target's secret never appears. (Whether the
    replacement's id is cited there is left to the ties: under this embedder it scores 0 like most records.)"""
    setup = cp.make_setup("test-coalition", 1, 15)
    pol = cp.probe_policy(2, 1, eps_acc=50.0, m=1, epsilon_token=50.0, tau=0, mechanism="pure-dp-rag")
    trials = cp.run_probe(
        tmp_path,
        models=_Models(),
        policy=pol,
        setup=setup,
        k_max=2,
        probes=1,
        trials=1,
        seed="t",
        templates=("What is {name}'s {kind}?",),
    )
    by = {t["world"]: t for t in trials}
    assert by["in"]["events"] == {"citations": [True, True], "answers": [True, True]}
    assert by["out"]["events"]["answers"] == [False, False]
    assert setup.secret in by["in"]["accounts"][0][0]["answer"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--k-max", "0"], "--k-max"),
        (["--trials", "0"], "--trials"),
        (["--eps-acc", "-1"], "--eps-acc"),
        (["--model", "gpt9"], "--model"),
        (["--mechanism", "gnmax"], "--mechanism"),
    ],
)
def test_coalition_probe_bad_input_one_line_exit_2(tmp_path, capsys, args, needle):
    rc = main(["experiment", "coalition-probe", "--out", str(tmp_path / "x"), "--no-progress", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0]


@pytest.mark.integration
def test_coalition_probe_toy_cli(tmp_path, capsys):
    out = tmp_path / "cp"
    rc = main(
        [
            "experiment",
            "coalition-probe",
            "--model",
            "toy",
            "--k-max",
            "2",
            "--probes",
            "1",
            "--trials",
            "2",
            "--n-distractors",
            "10",
            "--out",
            str(out),
            "--no-progress",
            "--json",
        ]
    )
    assert rc == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 4 and {r["schema"] for r in rows} == {"dprag.coalition-probe-row/1"}
    assert {(r["k"], r["channel"]) for r in rows} == {(k, c) for k in (1, 2) for c in ("citations", "answers")}
    trials = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
    assert len(trials) == 4 and all(len(t["accounts"]) == 2 for t in trials)
    run = json.loads((out / "run.json").read_text())
    assert run["k_max"] == 2 and run["versions"]["numpy"] and (out / "coalition_probe.png").exists()
    assert not (out / "_window").exists()


def test_probe_policy_valid_up_to_k20():
    for k in (1, 5, 20):
        pol = cp.probe_policy(k, 2)
        assert pol.coalition.delta_policy > k * pol.retrieval.delta_acc  # 002 §5.6 rule, checked by validate()


@pytest.mark.integration
def test_coalition_probe_rerun_with_the_same_seed_is_identical(tmp_path, capsys):
    """Account keys and request nonces derive from the seed, so every h_req and every draw the service makes
    from its committed seed and h_req repeat: the same seed gives the same answers and citations, another
    seed other citations (ε_acc = 1 noise: two identical lists of 2 trials × 2 worlds × 2 accounts would be a
    coincidence of probability far below 1e-6)."""

    def run(seed, name):
        out = tmp_path / name
        assert (
            main(
                [
                    "experiment",
                    "coalition-probe",
                    "--model",
                    "toy",
                    "--k-max",
                    "2",
                    "--probes",
                    "1",
                    "--trials",
                    "2",
                    "--n-distractors",
                    "10",
                    "--seed",
                    seed,
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
            == 0
        )
        capsys.readouterr()
        return [
            (t["trial"], t["world"], t["accounts"])
            for t in map(json.loads, (out / "trials.jsonl").read_text().splitlines())
        ]

    a, b, c = run("s1", "a"), run("s1", "b"), run("s2", "c")
    assert a == b
    assert [x[2] for x in a] != [x[2] for x in c]


def test_probe_policy_generation_is_the_demos_unless_overridden():
    """Default: the demo's committed generation (answer-level voting with the seen selection, m = 30, M = 1,
    τ = 512); ``mechanism="pure-dp-rag"`` gives the pilot's 000 Alg. 5; an unknown name is refused."""
    from dprag.errors import InvalidParameterError
    from dprag.lab.demo import build_policy, default_config

    g = cp.probe_policy(4, 2).generation
    assert g == build_policy(default_config("toy")).generation
    assert (g.mechanism, g.vote_selection, g.m, g.max_queries_per_doc, g.tau) == ("answer-vote", "seen", 30, 1, 512)
    t = cp.probe_policy(4, 2, mechanism="pure-dp-rag", m=7).generation
    assert (t.mechanism, t.m, t.vote_epsilon) == ("pure-dp-rag", 7, None)
    with pytest.raises(InvalidParameterError, match="mechanism"):
        cp.probe_policy(4, 2, mechanism="gnmax")
