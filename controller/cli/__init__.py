"""``overlaylab``: the command line (``main``), sweeps (``sweep``), the analytic model against
simulations (``model``) and the progress display of long phases (``progress``)."""
