"""libfabric (OFI): the transport, its C loop (``_ofiloop.c``, loaded by ``cloop``), its options and providers
(``options``) and fi_pingpong, the reference tool held against it (``fi_pingpong``)."""
