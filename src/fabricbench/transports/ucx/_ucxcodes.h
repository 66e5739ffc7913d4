/* The two-sided APIs fb_open takes and fb_rma's operations. _ucxloop.c includes this file and ucx/cloop.py reads
 * it (cbuild.read_codes: API_TAG is the API tag), so the two sides share one list.
 * Comments and one `#define NAME number` a line, nothing else: anything else is an error on the Python side. */
#define API_TAG 0
#define API_STREAM 1
#define API_AM 2
#define OP_PUT 0
#define OP_GET 1
