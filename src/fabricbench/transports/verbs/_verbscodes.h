/* The queue-pair types and operations fb_open, fb_op_latency and fb_stream take. _verbsloop.c includes this file
 * and verbs/cloop.py reads it (cbuild.read_codes: QP_UD is the qp type ud, OP_FOP the operation fop), so the two
 * sides share one list. Comments and one `#define NAME number` a line, nothing else: anything else is an error
 * on the Python side. */
#define QP_RC 0
#define QP_UC 1
#define QP_UD 2
#define OP_WRITE 0
#define OP_SEND 1
#define OP_READ 2
#define OP_FOP 3 /* fetch and add */
#define OP_CAS 4 /* compare and swap */
