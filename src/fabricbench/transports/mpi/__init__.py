"""MPI: the two-sided (``transport``) and one-sided (``rma``) transports, their C loop (``_mpiloop.c``, loaded by
``cloop``) and GPCNeT's canary and congestor loops (``congestion``)."""
