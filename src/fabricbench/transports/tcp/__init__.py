"""TCP sockets, the Ethernet baseline: the transport, its C loop (``_tcploop.c``, a Python extension), the link's
rate and route (``link``) and the congestion loops (``congestion``)."""
