"""``overlaylab``: the command line (``main``), sweeps (``sweep``) and the analytic model against
simulations (``model``)."""
