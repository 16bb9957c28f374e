"""CYCLON (Voulgaris et al. 2005): the peer-sampling layer that gossip, PolderCast and StaN stack
(``layer``). Not a protocol of its own."""
