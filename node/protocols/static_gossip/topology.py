"""A fixed topology: the node's neighbours are the contacts it joins with, and never change.

For overlays given as a graph (a ring, a Poisson or scale-free network, a dataset's edges): the
controller hands each node its neighbours in the graph as its bootstrap contacts
(``nodes.contacts`` in the experiment file) and this layer keeps them. It has no timer and sends
nothing; a neighbour that fails stays a neighbour.
"""

from __future__ import annotations

from collections.abc import Sequence

from node.kit.stack import Layer
from node.kit.types import Descriptor

LAYER = "static"


class StaticTopology(Layer):
    name = LAYER

    def bootstrap(self, contacts: Sequence[Descriptor]) -> None:
        me = self.stack.node_id
        self.view = {c.node_id: c.aged(0) for c in contacts if c.node_id != me}
