from collections import Counter

from controller import plans
from controller.config import parse_experiment


def exp(**sections):
    return parse_experiment({"name": "t", "seed": 5, **sections})


def test_same_seed_same_plans_other_seed_other_plans():
    a, b, c = exp(), exp(), parse_experiment({"seed": 6})
    for fn in (plans.subscriptions, plans.bootstrap_contacts):
        assert fn(a) == fn(b)
        assert fn(a) != fn(c)
    assert plans.publications(a, plans.subscriptions(a)) == plans.publications(b, plans.subscriptions(b))


def test_uniform_subscriptions():
    e = exp(nodes={"count": 2000}, workload={"topics": 10, "subscriptions_per_node": 3})
    subs = plans.subscriptions(e)
    assert all(len(s) == 3 for s in subs)
    per_topic = Counter(t for s in subs for t in s)
    assert len(per_topic) == 10
    # 2000 * 3 / 10 = 600 per topic; binomial stddev about 20.
    assert all(500 < n < 700 for n in per_topic.values())


def test_bootstrap_contacts_are_distinct_others():
    e = exp(nodes={"count": 10, "bootstrap_contacts": 4})
    for i, cs in enumerate(plans.bootstrap_contacts(e)):
        assert len(cs) == len(set(cs)) == 4 and i not in cs


def test_publications_follow_rate_and_publishers_subscribe():
    e = exp(publications={"count": 30, "rate_per_s": 5})
    subs = plans.subscriptions(e)
    pubs = plans.publications(e, subs)
    assert len(pubs) == 30
    assert [p.at_s for p in pubs] == [i / 5 for i in range(30)]
    assert all(p.topic in subs[p.node] for p in pubs)


def test_payload_size():
    e = exp(publications={"payload_bytes": 100})
    assert len(plans.payload(e, 3)) == 100
