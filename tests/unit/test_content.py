"""Content-based predicates (node/protocols/dps/content.py; DPS spec §2): normalisation, matching and the
soundness of containment, by example and by property (hypothesis)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.protocols.dps.content import TOP, Interval, Pattern, Predicate, Subscription, constraint_of, contains, matches, normalise, properly_contains
from node.protocols.dps.semantic_tree import SemanticTree

pytestmark = pytest.mark.unit

ints = st.integers(-6, 6)
floats = st.sampled_from([-2.5, -1.0, 0.0, 0.5, 1.0, 2.5, 3.0])
strings = st.text(alphabet="ab", max_size=4)


@st.composite
def int_predicate(draw: st.DrawFn) -> Predicate:
    return Predicate("a", draw(st.sampled_from(["=", "<", ">", "<=", ">="])), draw(ints))


@st.composite
def float_predicate(draw: st.DrawFn) -> Predicate:
    return Predicate("x", draw(st.sampled_from(["=", "<", ">", "<=", ">="])), draw(floats))


@st.composite
def string_predicate(draw: st.DrawFn) -> Predicate:
    op = draw(st.sampled_from(["=", "prefix", "suffix", "substr", "any"]))
    return Predicate("s", op, type="string") if op == "any" else Predicate("s", op, draw(strings))


def label(preds: list[Predicate]):
    [c] = normalise(preds).values()
    return c


def test_integer_bounds_are_closed_so_equivalent_predicates_name_one_label():
    assert constraint_of(Predicate("a", ">", 3)) == constraint_of(Predicate("a", ">=", 4))
    assert constraint_of(Predicate("a", ">", 3)).canon() == "num[4,+inf)"
    assert label([Predicate("a", ">", 2), Predicate("a", "<", 7)]).canon() == "num[3,6]"
    assert label([Predicate("x", ">", 2.5), Predicate("x", "<=", 7.0)]).canon() == "num(2.5,7.0]"


def test_a_range_is_one_interval_label_and_first_predicate_keeps_the_half_line():
    preds = [Predicate("a", ">", 10), Predicate("a", "<", 60)]
    assert normalise(preds) == {("a", "int"): Interval(11, 59)}
    assert normalise(preds, group_on="first_predicate") == {("a", "int"): Interval(11, math.inf, False, True)}


def test_string_label_is_the_most_selective_predicate_and_empty_patterns_are_top():
    preds = [Predicate("s", "substr", "b"), Predicate("s", "prefix", "a"), Predicate("s", "prefix", "ab")]
    assert label(preds) == Pattern("prefix", "ab")
    assert label([*preds, Predicate("s", "=", "abba")]) == Pattern("eq", "abba")
    assert label([Predicate("s", "suffix", "")]) is TOP and label([Predicate("s", "any", type="string")]) is TOP


@pytest.mark.parametrize("preds, words", [
    ([Predicate("a", ">", 5), Predicate("a", "<", 3)], "a: the predicates on it match no value"),
    ([Predicate("a", "<", "z")], "does not apply to strings"),
    ([Predicate("a", "prefix", 3)], "does not apply to numbers"),
    ([Predicate("a", "~", 3)], "unknown operator"),
    ([Predicate("a", "any")], "needs a type"),
    ([Predicate("a", "=", True)], "an int, a float or a string"),
])
def test_a_bad_conjunction_is_refused_naming_the_attribute(preds, words):
    with pytest.raises(ValueError, match=words):
        Subscription.of(preds)


def test_one_name_with_two_types_makes_two_trees():
    sub = Subscription.of([Predicate("a", ">", 1), Predicate("a", "=", "x")])
    assert set(sub.labels) == {("a", "int"), ("a", "string")}
    assert not sub.matches({"a": 5})  # one value cannot satisfy both


def test_containment_table_of_the_spec():
    assert contains(TOP, Pattern("eq", "x")) and not contains(Pattern("eq", "x"), TOP)
    assert contains(Interval(2, math.inf, False, True), Interval(3, 3))
    assert not contains(Interval(2, 5, True, False), Interval(2, 3))  # (2,5] lacks 2
    assert contains(Pattern("prefix", "ab"), Pattern("eq", "abc")) and contains(Pattern("prefix", "a"), Pattern("prefix", "ab"))
    assert contains(Pattern("suffix", "c"), Pattern("suffix", "bc")) and not contains(Pattern("suffix", "c"), Pattern("prefix", "c"))
    assert contains(Pattern("substr", "b"), Pattern("prefix", "ab")) and not contains(Pattern("eq", "a"), Pattern("prefix", "a"))
    assert not contains(Pattern("prefix", "a"), Pattern("suffix", "a"))  # incomparable kinds: no
    assert properly_contains(Interval(1, 9), Interval(2, 3)) and not properly_contains(Interval(1, 9), Interval(1, 9))


def test_full_filter_is_checked_at_delivery_not_only_the_label():
    sub = Subscription.of([Predicate("s", "prefix", "ab"), Predicate("s", "suffix", "z"), Predicate("p", ">", 1.5)])
    assert sub.labels[("s", "string")] == Pattern("prefix", "ab")
    assert sub.matches({"s": "abz", "p": 2.0, "other": 1})
    assert not sub.matches({"s": "aba", "p": 2.0})  # label matches, the suffix does not
    assert not sub.matches({"s": "abz"})  # a constrained attribute is missing
    assert not sub.matches({"s": "abz", "p": 2})  # an int is not a value of the float attribute


def test_join_attribute_policies():
    sub = Subscription.of([Predicate("b", "=", 1), Predicate("a", ">", 0), Predicate("c", "prefix", "x")])
    assert sub.join_attribute("first", random.Random(1)) == ("a", "int")
    assert sub.join_attribute("most_selective", random.Random(1), {("a", "int"): 0.5, ("b", "int"): 0.01}) == ("b", "int")
    picks = {sub.join_attribute("random", random.Random(s)) for s in range(40)}
    assert picks == set(sub.labels)
    with pytest.raises(ValueError, match="join_attr_policy"):
        sub.join_attribute("best", random.Random(1))


@settings(max_examples=300, deadline=None)
@given(st.lists(int_predicate(), min_size=1, max_size=3), st.integers(-9, 9))
def test_integer_label_matches_exactly_the_values_of_the_conjunction(preds, v):
    try:
        c = label(preds)
    except ValueError:  # refused only when no value satisfies all
        assert not any(all(p.matches(w) for p in preds) for w in range(-9, 10))
        return
    assert matches(c, v) == all(p.matches(v) for p in preds)


@settings(max_examples=300, deadline=None)
@given(st.lists(float_predicate(), min_size=1, max_size=3), floats)
def test_float_label_matches_exactly_the_values_of_the_conjunction(preds, v):
    try:
        c = label(preds)
    except ValueError:
        return
    assert matches(c, v) == all(p.matches(v) for p in preds)


@settings(max_examples=400, deadline=None)
@given(st.lists(int_predicate(), min_size=1, max_size=2), st.lists(int_predicate(), min_size=1, max_size=2))
def test_interval_containment_is_exact(ps, qs):
    try:
        p, q = label(ps), label(qs)
    except ValueError:
        return
    # over a window wider than every bound, so the unbounded sides are represented
    subset = all(matches(p, v) for v in range(-20, 21) if matches(q, v))
    assert contains(p, q) == subset


@settings(max_examples=400, deadline=None)
@given(string_predicate(), string_predicate(), st.lists(strings, min_size=1, max_size=30))
def test_string_containment_is_sound(p_pred, q_pred, values):
    p, q = constraint_of(p_pred), constraint_of(q_pred)
    if contains(p, q):
        assert all(matches(p, v) for v in values if matches(q, v))


def test_string_containment_finds_the_containments_within_a_kind():
    words = ["", "a", "b", "ab", "ba", "aa", "abb", "bab"]
    universe = [w1 + w2 for w1 in words for w2 in words]
    for kind in ("eq", "prefix", "suffix", "substr"):
        for x in words[1:]:
            for y in words[1:]:
                p, q = Pattern(kind, x), Pattern(kind, y)
                subset = all(matches(p, v) for v in universe if matches(q, v))
                assert contains(p, q) == subset, (kind, x, y)


# --- the tree of semantic groups (node/protocols/dps/semantic_tree.py; spec §4.3) ---------------------


def _labels(*preds: Predicate):
    return [constraint_of(p) for p in preds]


def test_the_worked_example_of_the_spec_builds_its_tree_and_routes_a_4():
    tree = SemanticTree()
    g = {p: tree.insert(c) for p, c in zip(["a>2", "a<11", "a>3", "a=4", "a=3", "a<4"], _labels(
        Predicate("a", ">", 2), Predicate("a", "<", 11), Predicate("a", ">", 3), Predicate("a", "=", 4),
        Predicate("a", "=", 3), Predicate("a", "<", 4)), strict=True)}
    assert tree.root.children == [g["a>2"], g["a<11"]]
    assert g["a>2"].children == [g["a>3"], g["a=3"]]  # a=3 below a>2: a>3 does not contain 3
    assert g["a>3"].children == [g["a=4"]] and g["a<11"].children == [g["a<4"]]
    assert tree.publish(4) == [tree.root, g["a>2"], g["a>3"], g["a=4"], g["a<11"]]
    assert tree.insert(constraint_of(Predicate("a", ">=", 4))) is g["a>3"]  # an equal label is found
    assert tree.depth() == 4


def test_a_new_group_adopts_the_children_it_contains():
    tree = SemanticTree()
    narrow = [tree.insert(c) for c in _labels(Predicate("a", "=", 5), Predicate("a", "=", 7), Predicate("a", "=", 20))]
    wide = tree.insert(Interval(0, 10))
    assert wide.children == narrow[:2] and all(c.parent is wide for c in narrow[:2])
    assert tree.root.children == [narrow[2], wide]


def test_string_groups_descend_into_the_most_selective_container():
    tree = SemanticTree()
    sub, pre, eq = (tree.insert(Pattern(k, s)) for k, s in [("substr", "b"), ("prefix", "ab"), ("eq", "abc")])
    assert tree.root.children == [sub] and sub.children == [pre] and pre.children == [eq]
    assert [x.label for x in tree.publish("abc")] == [TOP, sub.label, pre.label, eq.label]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(int_predicate(), min_size=1, max_size=2), min_size=1, max_size=12), st.integers(-9, 9))
def test_every_tree_edge_is_a_containment_and_an_event_visits_exactly_the_matching_groups(subs, v):
    tree = SemanticTree()
    for preds in subs:
        try:
            tree.insert(label(preds))
        except ValueError:
            continue
    for g in tree.groups():
        assert all(contains(g.label, c.label) and c.parent is g for c in g.children)
    assert {id(g) for g in tree.publish(v)} == {id(g) for g in tree.groups() if matches(g.label, v)}
