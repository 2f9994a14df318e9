"""The shared option parsing of the ``dprag experiment`` commands: every error names the flag and the rule."""

import click
import pytest

from dprag.lab.experiments.options import Fail, auto_ints, choices, finite_floats, parse_list, positive_floats


def _message(fn, *args):
    with pytest.raises(click.BadParameter) as e:
        fn(*args)
    return e.value.param_hint, e.value.format_message()


def test_lists_parse_and_skip_empty_items():
    assert parse_list("--k", "1, 2,,5", int) == (1, 2, 5)
    assert positive_floats("--eps", "0.5,4") == (0.5, 4.0)
    assert finite_floats("--taus", "-3,0") == (-3.0, 0.0)
    assert auto_ints("--m", "0,10") == (0, 10)
    assert choices("--methods", "murag, dp-ksa,murag", ("murag", "dp-ksa", "npr")) == ["murag", "dp-ksa"]


@pytest.mark.parametrize(
    "fn,args,flag,rule",
    [
        (parse_list, ("--k", "1,x", int), "--k", "comma-separated numbers"),
        (parse_list, ("--k", " , ", int), "--k", "must not be empty"),
        (positive_floats, ("--eps", "1,0"), "--eps", "> 0"),
        (positive_floats, ("--eps", "nan"), "--eps", "finite"),
        (finite_floats, ("--bins", "1,inf"), "--bins", "finite"),
        (auto_ints, ("--m", "4,-1"), "--m", ">= 0"),
        (auto_ints, ("--m", "4.5"), "--m", "comma-separated integers"),
        (choices, ("--attacks", "s2mia,s3mia", ("s2mia",)), "--attacks", "s3mia"),
        (choices, ("--attacks", "", ("s2mia",)), "--attacks", "choose from"),
    ],
)
def test_bad_lists_name_the_flag_and_the_rule(fn, args, flag, rule):
    hint, msg = _message(fn, *args)
    assert hint == flag and rule in msg


def test_fail_exits_2():
    assert Fail("budget: must be > 0").exit_code == 2


def test_finite_floats_accepts_negatives_and_does_not_claim_a_sign_rule():
    """--taus / --bins / --vote-thresholds may be ≤ 0; a NaN is refused for being non-finite, not for its sign."""
    hint, msg = _message(finite_floats, "--taus", "-1,nan")
    assert hint == "--taus" and "finite" in msg and "> 0" not in msg
