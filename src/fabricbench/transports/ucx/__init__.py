"""UCX: the transport over UCP, its C loop (``_ucxloop.c``, loaded by ``cloop``), its options (``options``) and
ucx_perftest, the reference tool held against it (``ucx_perftest``)."""
