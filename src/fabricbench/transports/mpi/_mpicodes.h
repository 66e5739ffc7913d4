/* fb_collective's operation codes. _mpiloop.c includes this file and mpi/cloop.py reads it (cbuild.read_codes:
 * OP_REDUCE_SCATTER is the kernel reduce_scatter), so the two sides share one list. Comments and one
 * `#define NAME number` a line, nothing else: anything else is an error on the Python side. */
#define OP_ALLREDUCE 0
#define OP_ALLGATHER 1
#define OP_ALLTOALL 2
#define OP_BCAST 3
#define OP_REDUCE 4
#define OP_REDUCE_SCATTER 5
#define OP_BARRIER 6
/* The rooted collectives and the v-variants: the v-variants take OSU's counts and displacements, every rank's
 * block `count` elements at r * count (MPI_Alltoallw's in bytes). */
#define OP_GATHER 20
#define OP_GATHERV 21
#define OP_SCATTER 22
#define OP_SCATTERV 23
#define OP_ALLGATHERV 24
#define OP_ALLTOALLV 25
#define OP_ALLTOALLW 26
#define OP_REDUCE_SCATTER_BLOCK 27
/* fb_collective's mode bits: a persistent request, and which buffer this rank passes as MPI_IN_PLACE. */
#define COLL_PERSISTENT 1
#define COLL_SEND_IN_PLACE 2
#define COLL_RECV_IN_PLACE 4
/* fb_rma_sync's one-sided operations (mpi/rma.py's kernels) and OSU's synchronisations (-s), read by mpi/cloop.py. */
#define RMA_OP_PUT 0
#define RMA_OP_GET 1
#define RMA_OP_ACC 2
#define RMA_OP_GET_ACC 3
#define RMA_OP_FOP 4
#define RMA_OP_CAS 5
#define RMA_SYNC_LOCK 0
#define RMA_SYNC_FLUSH 1
#define RMA_SYNC_FLUSH_LOCAL 2
#define RMA_SYNC_LOCK_ALL 3
#define RMA_SYNC_PSCW 4
#define RMA_SYNC_FENCE 5
/* The neighbourhood collectives, on a distributed graph communicator (fb_neighbor, fb_icollective). */
#define OP_NEIGHBOR_ALLGATHER 40
#define OP_NEIGHBOR_ALLGATHERV 41
#define OP_NEIGHBOR_ALLTOALL 42
#define OP_NEIGHBOR_ALLTOALLV 43
#define OP_NEIGHBOR_ALLTOALLW 44
