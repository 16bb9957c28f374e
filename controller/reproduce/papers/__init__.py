"""One module per paper: how this project checks each of its claims (``claims()``)."""
