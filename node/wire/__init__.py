"""What goes on the wire and into the run directory: the one protobuf mapping of the kit's messages
(``codec``), the columns of snapshots (``snapshots``)."""
