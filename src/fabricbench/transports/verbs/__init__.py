"""RDMA verbs: the transports (``transport``: WRITE and SEND), pyverbs' set-up (``rdma``), the C loop
(``_verbsloop.c``, loaded by ``cloop``), the ports' rates (``link``, ``link_rate``) and perftest, the reference tool
held against it (``perftest``)."""
