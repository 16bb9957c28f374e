"""The analytic model (analysis/gossip_model.py) against the numbers ferretti-gossip.md derives
from the paper's formulas (§7.2 and §7.3), which were computed independently of this code."""

import math

import pytest

from analysis import gossip_model as gm

POISSON = gm.Degrees.poisson(5)


@pytest.mark.parametrize("gamma,sigma,r", [
    (0.0, 0.01, 1.053), (0.0, 0.15, 4.000), (0.05, 0.05, 1.951), (0.05, 0.12, 5.556), (0.05, 0.15, 26.67),
    (0.10, 0.02, 2.439), (0.10, 0.05, 3.636), (0.10, 0.10, 20.00), (0.15, 0.02, 6.061),
])
def test_eq17_on_poisson_5_reproduces_the_specs_table(gamma, sigma, r):
    assert gm.mean_receivers(POISSON, gm.link_probability(sigma, gamma)) == pytest.approx(r, abs=0.0006 * r + 1e-3)


def test_threshold_and_divergence():
    assert gm.critical(POISSON) == pytest.approx(0.2)
    assert gm.mean_receivers(POISSON, gm.link_probability(0.12, 0.1)) == math.inf
    assert (gm.critical(POISSON) - 0.1) / (1 - 0.1) == pytest.approx(0.111, abs=5e-4)  # sigma_c(0.1)


def test_subscriber_estimates_paper_and_corrected():
    big = gm.link_probability(0.05, 0.1)
    r = gm.mean_receivers(POISSON, big)
    assert gm.subscribers_paper(0.05, r) == pytest.approx(0.182, abs=5e-4)
    assert gm.subscribers_corrected(0.05, big, r) == pytest.approx(0.959, abs=5e-4)
    # on Poisson graphs the ratio is exactly lambda + 1/<r> (§6 item 10)
    assert gm.subscribers_corrected(0.05, big, r) / gm.subscribers_paper(0.05, r) == pytest.approx(5 + 1 / r)


@pytest.mark.parametrize("sigma,gamma,fraction", [
    (0.15, 0.1, 0.029), (0.2, 0.1, 0.107), (0.4, 0.1, 0.431), (0.6, 0.1, 0.667),
    (0.1, 0.15, 0.040), (0.1, 0.3, 0.498), (0.1, 0.6, 0.902),
])
def test_outbreak_estimator_on_poisson_5_reproduces_the_spec(sigma, gamma, fraction):
    assert gm.outbreak(POISSON, sigma, gamma).fraction == pytest.approx(fraction, abs=0.0006)


def test_estimator_is_not_symmetric_in_sigma_and_gamma():
    """§10 item 3: the same Gamma, different reach."""
    assert gm.outbreak(POISSON, 0.6, 0.1).fraction < gm.outbreak(POISSON, 0.1, 0.6).fraction - 0.2


def test_acl_nominal_estimator_and_threshold():
    from controller.experiment.topology import acl_degrees

    counts: dict[int, int] = {}
    for k in acl_degrees(6, 1).tolist():
        counts[k] = counts.get(k, 0) + 1
    d = gm.Degrees.from_histogram(counts)
    assert (d.k1, d.k2) == (pytest.approx(53.83, abs=0.01), pytest.approx(10599, abs=1))
    assert gm.critical(d) == pytest.approx(0.0051, abs=1e-4)
    assert gm.outbreak(d, 0.1, 0.1).fraction == pytest.approx(0.481, abs=0.001)
    assert gm.outbreak(d, 0.1, 0.6).fraction == pytest.approx(0.857, abs=0.001)


@pytest.mark.parametrize("k_max,gamma_c", [(100, 0.859), (1000, 0.689)])
def test_power_law_threshold_depends_on_the_cut_off(k_max, gamma_c):
    """§4.3: p_k ∝ k^-3.3, k_min = 1, cut off at 100 or 1,000."""
    assert gm.critical(gm.Degrees.power_law(3.3, 1, k_max)) == pytest.approx(gamma_c, abs=0.001)


def test_predict_switches_regime_at_the_threshold():
    below, above = gm.predict(POISSON, 0.05, 0.1, 10_000), gm.predict(POISSON, 0.4, 0.1, 10_000)
    assert below["regime"] == "below" and below["receivers"] == pytest.approx(3.636, abs=1e-3)
    assert above["regime"] == "above" and above["receivers"] == pytest.approx(4_310, abs=10)
