"""What goes on the wire: the one protobuf mapping of the kit's messages (``codec``)."""
