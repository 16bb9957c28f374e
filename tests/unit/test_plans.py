from collections import Counter

import pytest

from controller.experiment import plans
from controller.experiment.schema import parse_experiment
from controller.experiment.workloads import PlanError


def exp(**sections):
    return parse_experiment({"name": "t", "seed": 5, **sections})


def test_same_seed_same_plan_other_seed_other_plan():
    spec = {"nodes": {"count": 50}, "churn": {"model": "sessions", "fraction": 0.3, "session": {"mean_s": 3}},
            "network": {"delay": {"model": "distribution"}, "partitions": [{"start_s": 1, "end_s": 2, "fraction": 0.2}]}}
    a, b = plans.render(exp(**spec)), plans.render(exp(**spec))
    c = plans.render(parse_experiment({"seed": 6, **spec}))
    for field in ("subscriptions", "contacts", "publications"):
        assert getattr(a, field) == getattr(b, field)
        assert getattr(a, field) != getattr(c, field)
    assert a.churn.events == b.churn.events != c.churn.events
    assert [p.nodes for p in a.network.partitions] == [p.nodes for p in b.network.partitions]
    assert [a.network.base_delay(1, j) for j in range(50)] == [b.network.base_delay(1, j) for j in range(50)]


def test_bootstrap_contacts_are_distinct_others():
    e = exp(nodes={"count": 10, "bootstrap_contacts": 4})
    for i, cs in enumerate(plans.bootstrap_contacts(e)):
        assert len(cs) == len(set(cs)) == 4 and i not in cs


def test_full_membership_is_one_list_every_node_shares():
    """nodes.contacts: all: every node online at the start, in one list (no N² copies at 10,000
    nodes), filtered once for the nodes offline at the start; a joiner gets every live node."""
    e = exp(nodes={"count": 40, "contacts": "all"}, churn={"model": "sessions", "fraction": 0.5, "arrival_rate_per_s": 1})
    plan = plans.render(e)
    assert all(cs is plan.contacts[0] for cs in plan.contacts) and plan.contacts[0] == list(range(40))
    online = plans.initial_contacts(plan, 0)
    assert all(plans.initial_contacts(plan, i) is online for i in range(40))
    assert set(online) == set(range(40)) - plan.churn.offline_at_start and plan.churn.offline_at_start
    assert plans.join_contacts(e, plan, 3, 5.0, {1, 3, 7, 9}) == [1, 7, 9]


def test_ring_contacts_are_the_nearest_ids_on_both_sides_and_form_one_undirected_ring():
    e = exp(nodes={"count": 10, "bootstrap_contacts": 4, "contacts": "ring"})
    contacts = plans.bootstrap_contacts(e)
    assert contacts[0] == [1, 2, 8, 9] and contacts[5] == [3, 4, 6, 7]
    assert all(i in contacts[j] for i, cs in enumerate(contacts) for j in cs)  # symmetric
    one = plans.bootstrap_contacts(exp(nodes={"count": 10, "bootstrap_contacts": 1, "contacts": "ring"}))
    assert one[0] == [1, 9]


def test_schedule_orders_by_time_then_churn_partitions_publications():
    e = exp(nodes={"count": 20}, publications={"count": 4, "rate_per_s": 1}, phases={"warmup_s": 1},
            churn={"model": "sessions", "fraction": 0.5, "session": {"mean_s": 1}},
            network={"partitions": [{"start_s": 1, "end_s": 2, "fraction": 0.2}]})
    plan = plans.render(e)
    steps = plans.schedule(e, plan)
    rank = {"join": 0, "leave": 0, "crash": 0, "partition_on": 1, "partition_off": 1, "publish": 2}
    assert steps == sorted(steps, key=lambda s: (s.at_s, rank[s.kind]))
    assert [s.index for s in steps if s.kind == "publish"] == list(range(len(plan.publications)))
    assert sum(s.kind in plans.CHURN_KINDS for s in steps) == len(plan.churn.events) > 0
    assert [s.kind for s in plans.schedule(e, plan, load=True) if s.kind in ("publish", "load")] == ["load"]


def test_rate_publications_follow_rate_and_publishers_subscribe():
    e = exp(publications={"count": 30, "rate_per_s": 5}, phases={"warmup_s": 2})
    plan = plans.render(e)
    assert [p.at_s for p in plan.publications] == [2 + i / 5 for i in range(30)]
    assert all(p.topic in plan.subscriptions[p.node] for p in plan.publications)


def test_per_topic_publications_cover_every_non_empty_topic_each_round():
    e = exp(workload={"model": "zipf", "topics": 50, "alpha": 1.5, "subscriptions": {"min": 1, "max": 1}},
            nodes={"count": 100}, publications={"mode": "per_topic", "rounds": 3})
    plan = plans.render(e)
    topics = {t for s in plan.subscriptions for t in s}
    assert Counter(p.topic for p in plan.publications) == {t: 3 for t in topics}


def test_popularity_topic_choice_follows_subscriber_counts():
    e = exp(workload={"model": "zipf", "topics": 20, "alpha": 1.2, "subscriptions": {"min": 1, "max": 1}},
            nodes={"count": 2000}, publications={"count": 5000, "topic_choice": "popularity"})
    plan = plans.render(e)
    subs = Counter(t for s in plan.subscriptions for t in s)
    pubs = Counter(p.topic for p in plan.publications)
    top = subs.most_common(1)[0][0]
    assert abs(pubs[top] / 5000 - subs[top] / 2000) < 0.03


def test_publishers_are_online_under_churn():
    e = exp(nodes={"count": 40}, publications={"count": 100, "rate_per_s": 5},
            churn={"model": "sessions", "fraction": 0.5, "session": {"mean_s": 2}, "downtime": {"mean_s": 2}})
    plan = plans.render(e)
    for p in plan.publications:
        assert p.node in plan.churn.alive_at(p.at_s, 40)


def test_payload_size():
    assert len(plans.payload(exp(publications={"payload_bytes": 100}), 3)) == 100


def test_no_subscriptions_at_all_is_a_plan_error(tmp_path):
    f = tmp_path / "subs.txt"
    f.write_text("# empty\n")
    with pytest.raises(PlanError):
        plans.render(exp(nodes={"count": 2}, workload={"model": "trace", "path": str(f)}))
