/* The endpoint types fb_probe and fb_open take, and fb_rma's operations. _ofiloop.c includes this file and
 * ofi/cloop.py reads it (cbuild.read_codes: EP_RDM is the endpoint rdm), so the two sides share one list.
 * Comments and one `#define NAME number` a line, nothing else: anything else is an error on the Python side. */
#define EP_RDM 0
#define EP_MSG 1
#define OP_WRITE 0
#define OP_READ 1
