"""The experiment: its schema (``schema``) and the plans rendered from it (workloads, publications,
churn, network, topologies), pure functions of (experiment, seed)."""
