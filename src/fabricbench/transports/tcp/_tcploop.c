/* The tcp transport's timed loops for ping-pong, one-way streaming and the congestion kernel, outside the
 * interpreter.
 *
 * A Python loop adds the interpreter's cost to every message, and on a fast
 * loopback or a 100 Gb/s NIC that cost is a visible part of what gets
 * reported (README gives the figures). These loops make the same
 * system calls as fabricbench's Python loops, and as osu_latency and osu_bw
 * make over their fabric: one send and one receive per message, one
 * fb_runtime.h stamp (CLOCK_MONOTONIC in ns) per iteration.
 *
 * The socket must be blocking with SO_RCVTIMEO/SO_SNDTIMEO set: a timeout
 * then comes back as EAGAIN and is raised as BlockingIOError, as in Python.
 * The ping-pong blocks in send and recv: one system call per message. The
 * streaming window instead calls them with MSG_DONTWAIT and waits in poll()
 * when the socket is full or empty, as iperf3 does, which keeps both ends
 * busy where a blocking call would sleep a whole wake-up. poll() waits at most
 * the socket's own SO_SNDTIMEO/SO_RCVTIMEO in all.
 * The GIL is released for the whole loop, so the runner's watchdog thread
 * keeps running. Signals: a call interrupted by one (EINTR), and in any case
 * every SIGNAL_CHECK_NS (a signal may land on another thread and interrupt
 * nothing here), take the GIL back just long enough to run Python's
 * handlers; if one raises (Ctrl-C), the loop ends with that error. An orderly
 * close by the peer is raised as EOFError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>

#include "fb_runtime.h"

enum { OK = 0, CLOSED = -1, FAILED = -2, SIGNALLED = -3 };

#define SIGNAL_CHECK_NS 50000000LL /* 50 ms */

/* EINTR: run Python's signal handlers with the GIL, then go on unless one raised. */
static int interrupted(PyThreadState **state)
{
    PyEval_RestoreThread(*state);
    int raised = PyErr_CheckSignals();
    *state = PyEval_SaveThread();
    return raised;
}

/* Between messages: run pending signal handlers if SIGNAL_CHECK_NS passed since `*checked`. */
static inline int due(int64_t now, int64_t *checked, PyThreadState **state)
{
    if (now - *checked < SIGNAL_CHECK_NS)
        return 0;
    *checked = now;
    return interrupted(state);
}

static int send_all(int fd, const char *buf, size_t size, PyThreadState **state)
{
    size_t sent = 0;
    while (sent < size) {
        ssize_t n = send(fd, buf + sent, size - sent, MSG_NOSIGNAL);
        if (n >= 0) {
            sent += (size_t)n;
        } else if (errno != EINTR) {
            return FAILED;
        } else if (interrupted(state)) {
            return SIGNALLED;
        }
    }
    return OK;
}

/* One plain recv first (a small message arrives whole), then MSG_WAITALL for the rest. */
static int recv_all(int fd, char *buf, size_t size, PyThreadState **state)
{
    size_t got = 0;
    while (got < size) {
        ssize_t n = recv(fd, buf + got, size - got, got ? MSG_WAITALL : 0);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0) {
            return CLOSED;
        } else if (errno != EINTR) {
            return FAILED;
        } else if (interrupted(state)) {
            return SIGNALLED;
        }
    }
    return OK;
}

/* The socket's SO_RCVTIMEO or SO_SNDTIMEO in ns; 0 means none (wait for ever), as for the kernel. */
static int64_t socket_timeout_ns(int fd, int option)
{
    struct timeval limit = {0, 0};
    socklen_t length = sizeof limit;
    if (getsockopt(fd, SOL_SOCKET, option, &limit, &length))
        return 0;
    return (int64_t)limit.tv_sec * 1000000000LL + (int64_t)limit.tv_usec * 1000LL;
}

/* The streaming side of a socket: MSG_DONTWAIT calls, and poll() in between for at most `timeout_ns`. */
typedef struct {
    int fd;
    int64_t send_timeout_ns, recv_timeout_ns;
} Stream;

/* Wait until `events` or the timeout, in slices of SIGNAL_CHECK_NS so that Python's handlers run.
   A timeout returns FAILED with errno EAGAIN, as a blocking call with SO_*TIMEO would. */
static int wait_for(const Stream *stream, short events, int64_t timeout_ns, PyThreadState **state)
{
    int64_t start = fb_now_ns();
    for (;;) {
        struct pollfd ready = {stream->fd, events, 0};
        int n = poll(&ready, 1, (int)(SIGNAL_CHECK_NS / 1000000));
        if (n > 0)
            return OK;
        if (n < 0 && errno != EINTR)
            return FAILED;
        if (interrupted(state))
            return SIGNALLED;
        if (timeout_ns > 0 && fb_now_ns() - start >= timeout_ns) {
            errno = EAGAIN;
            return FAILED;
        }
    }
}

/* A MSG_DONTWAIT call failed: wait in poll() when it would have blocked, run handlers on EINTR. */
static int call_failed(const Stream *stream, short events, int64_t timeout_ns, PyThreadState **state)
{
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return wait_for(stream, events, timeout_ns, state);
    if (errno != EINTR)
        return FAILED;
    return interrupted(state) ? SIGNALLED : OK;
}

static int stream_send(const Stream *stream, const char *buf, size_t size, PyThreadState **state)
{
    int outcome = OK;
    for (size_t sent = 0; sent < size && outcome == OK;) {
        ssize_t n = send(stream->fd, buf + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0)
            sent += (size_t)n;
        else
            outcome = call_failed(stream, POLLOUT, stream->send_timeout_ns, state);
    }
    return outcome;
}

static int stream_recv(const Stream *stream, char *buf, size_t size, PyThreadState **state)
{
    int outcome = OK;
    for (size_t got = 0; got < size && outcome == OK;) {
        ssize_t n = recv(stream->fd, buf + got, size - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0)
            outcome = CLOSED;
        else
            outcome = call_failed(stream, POLLIN, stream->recv_timeout_ns, state);
    }
    return outcome;
}

/* After the loop, with the GIL held again: turn an outcome into a Python exception. */
static PyObject *finish(int outcome, int saved_errno)
{
    switch (outcome) {
    case OK:
        Py_RETURN_NONE;
    case CLOSED:
        PyErr_SetNone(PyExc_EOFError);
        return NULL;
    case FAILED:
        errno = saved_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    default: /* SIGNALLED: the handler's exception is already set */
        return NULL;
    }
}

/* Take the GIL back and turn the outcome into the result; errno is read before Python can change it. */
static PyObject *leave(int outcome, PyThreadState *state)
{
    int saved_errno = errno;
    PyEval_RestoreThread(state);
    return finish(outcome, saved_errno);
}

/* Release the NULL-terminated list of buffers a call took. */
static void release(Py_buffer **views)
{
    for (; *views; views++)
        PyBuffer_Release(*views);
}

static int check_times(Py_buffer *times, Py_ssize_t iterations, int initiator)
{
    if (initiator && times->len < iterations * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "times holds fewer than `iterations` int64 samples");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(pingpong_doc,
             "pingpong(fd, send, recv, iterations, times, initiator)\n--\n\n"
             "osu_latency's loop. The initiator sends `send`, receives len(recv) bytes and writes each round\n"
             "trip in ns to the int64 buffer `times`; the responder receives, then sends back.");

static PyObject *pingpong(PyObject *Py_UNUSED(self), PyObject *args)
{
    int fd, initiator;
    Py_ssize_t iterations;
    Py_buffer out, in, times;
    if (!PyArg_ParseTuple(args, "iy*w*nw*p", &fd, &out, &in, &iterations, &times, &initiator))
        return NULL;
    PyObject *result = NULL;
    if (iterations < 0) {
        PyErr_SetString(PyExc_ValueError, "iterations < 0");
        goto done;
    }
    if (check_times(&times, iterations, initiator))
        goto done;
    int outcome = OK;
    const char *send_buf = out.buf;
    char *recv_buf = in.buf;
    size_t out_size = (size_t)out.len, in_size = (size_t)in.len;
    int64_t *samples = times.buf;
    PyThreadState *state = PyEval_SaveThread();
    int64_t checked = fb_now_ns();
    if (initiator) {
        int64_t last = checked;
        for (Py_ssize_t i = 0; i < iterations; i++) {
            if ((outcome = send_all(fd, send_buf, out_size, &state)) != OK)
                break;
            if ((outcome = recv_all(fd, recv_buf, in_size, &state)) != OK)
                break;
            int64_t now = fb_stamp(samples, i, &last);
            if (due(now, &checked, &state)) {
                outcome = SIGNALLED;
                break;
            }
        }
    } else {
        for (Py_ssize_t i = 0; i < iterations; i++) {
            if ((outcome = recv_all(fd, recv_buf, in_size, &state)) != OK)
                break;
            if ((outcome = send_all(fd, send_buf, out_size, &state)) != OK)
                break;
            if (due(fb_now_ns(), &checked, &state)) {
                outcome = SIGNALLED;
                break;
            }
        }
    }
    result = leave(outcome, state);
done:
    release((Py_buffer *[]){&out, &in, &times, NULL});
    return result;
}

PyDoc_STRVAR(window_doc,
             "window(fd, send, recv, ack, ack_in, iterations, window, times, initiator)\n--\n\n"
             "osu_bw's loop. The initiator sends `send` `window` times, then waits for a 1-byte ack and writes\n"
             "each iteration's time in ns to `times`; the receiver takes `window` messages of len(recv)\n"
             "bytes, then sends `ack`. Both wait in poll(), within the socket's SO_SNDTIMEO/SO_RCVTIMEO.");

static PyObject *window(PyObject *Py_UNUSED(self), PyObject *args)
{
    int fd, initiator;
    Py_ssize_t iterations, messages;
    Py_buffer out, in, ack, ack_in, times;
    if (!PyArg_ParseTuple(args, "iy*w*y*w*nnw*p", &fd, &out, &in, &ack, &ack_in, &iterations, &messages, &times,
                          &initiator))
        return NULL;
    PyObject *result = NULL;
    if (iterations < 0 || messages < 1 || ack.len < 1 || ack_in.len < 1) {
        PyErr_SetString(PyExc_ValueError, "iterations < 0, window < 1 or an empty ack buffer");
        goto done;
    }
    if (check_times(&times, iterations, initiator))
        goto done;
    int outcome = OK;
    const char *send_buf = out.buf, *ack_buf = ack.buf;
    char *recv_buf = in.buf, *ack_in_buf = ack_in.buf;
    size_t out_size = (size_t)out.len, in_size = (size_t)in.len;
    int64_t *samples = times.buf;
    Stream stream = {fd, socket_timeout_ns(fd, SO_SNDTIMEO), socket_timeout_ns(fd, SO_RCVTIMEO)};
    PyThreadState *state = PyEval_SaveThread();
    /* A window of large messages over a slow link can take seconds: the clock is read for signals
       every 16 messages, not only once per window. */
    int64_t checked = fb_now_ns();
    unsigned count = 0;
    if (initiator) {
        int64_t last = checked;
        for (Py_ssize_t i = 0; i < iterations && outcome == OK; i++) {
            for (Py_ssize_t m = 0; m < messages && outcome == OK; m++)
                if ((outcome = stream_send(&stream, send_buf, out_size, &state)) == OK && (++count & 15) == 0 &&
                    due(fb_now_ns(), &checked, &state))
                    outcome = SIGNALLED;
            if (outcome != OK || (outcome = stream_recv(&stream, ack_in_buf, 1, &state)) != OK)
                break;
            fb_stamp(samples, i, &last);
        }
    } else {
        for (Py_ssize_t i = 0; i < iterations && outcome == OK; i++) {
            for (Py_ssize_t m = 0; m < messages && outcome == OK; m++)
                if ((outcome = stream_recv(&stream, recv_buf, in_size, &state)) == OK && (++count & 15) == 0 &&
                    due(fb_now_ns(), &checked, &state))
                    outcome = SIGNALLED;
            if (outcome == OK)
                outcome = stream_send(&stream, ack_buf, 1, &state);
        }
    }
    result = leave(outcome, state);
done:
    release((Py_buffer *[]){&out, &in, &ack, &ack_in, &times, NULL});
    return result;
}

/* The congestion kernel's loops (tcp_congestion.py): a canary's samples and a congestor's pattern, each run as a
 * schedule that Python builds and checks once per case (a "program", an int64 array):
 *
 *   words[0..2]: the number of steps, lanes and segments, then
 *   each step:    first lane, lane count, action, segment a, segment b   (the action runs once its lanes are done)
 *   each lane:    fd, direction (0 receive, 1 send), first segment, segment count
 *   each segment: buffer index, offset, size                             (into the call's tuple of buffers)
 *
 * A step's lanes progress together: each sends or receives its segments in order, with MSG_DONTWAIT, and when
 * none can move the step waits in poll() for any of them, so no two ranks that send to each other at once can
 * deadlock, whatever the message size. A step has at most one lane per (fd, direction): two messages on one socket
 * go in the order the program gives, on both ends. A wait with no byte moved for `timeout` seconds fails as a
 * blocking call with SO_*TIMEO would (EAGAIN, raised as BlockingIOError); `where[0]` then holds the fd that failed
 * or stalled, so that Python names the peer. Signals are run every SIGNAL_CHECK_NS as in the loops above. */

enum { RECEIVE = 0, SEND = 1 };
enum { NO_ACTION = 0, ADD_INT64 = 1, COPY = 2 };
enum { STEP_WORDS = 5, LANE_WORDS = 4, SEG_WORDS = 3 };

typedef struct {
    char *buf;
    size_t size;
} Seg;

typedef struct {
    int fd, direction;
    Py_ssize_t first, count; /* its segments */
    Py_ssize_t at;           /* progress: the segment in flight and its bytes done */
    size_t done;
} Lane;

typedef struct {
    Py_ssize_t first, count; /* its lanes */
    int action;
    Py_ssize_t a, b;
} Step;

typedef struct {
    Step *steps;
    Lane *lanes;
    Seg *segs;
    Py_ssize_t n_steps, n_lanes, n_segs;
} Program;

typedef struct {
    struct pollfd *polls; /* one per lane of the widest step */
    int64_t timeout_ns;
    int64_t checked;      /* when signals last ran */
    PyThreadState *state;
    int64_t *where;
} Runner;

static void program_free(Program *program)
{
    free(program->steps);
    free(program->lanes);
    free(program->segs);
    program->steps = NULL, program->lanes = NULL, program->segs = NULL;
}

static int bad_program(Program *program, const char *why)
{
    program_free(program);
    PyErr_Format(PyExc_ValueError, "congestion program: %s", why);
    return -1;
}

/* Decode and check a program against the buffers, with the GIL held: every index in range, every segment inside
 * its buffer and not empty, an action's two segments of one size (ADD_INT64: whole int64s). */
static int program_decode(Py_buffer *code, Py_buffer *buffers, Py_ssize_t n_buffers, Program *program)
{
    const int64_t *w = code->buf;
    Py_ssize_t words = code->len / (Py_ssize_t)sizeof(int64_t);
    memset(program, 0, sizeof *program);
    if (words < 3 || w[0] < 0 || w[1] < 0 || w[2] < 0 || w[0] > words || w[1] > words || w[2] > words ||
        3 + STEP_WORDS * w[0] + LANE_WORDS * w[1] + SEG_WORDS * w[2] != words)
        return bad_program(program, "its length does not match its counts");
    program->n_steps = (Py_ssize_t)w[0], program->n_lanes = (Py_ssize_t)w[1], program->n_segs = (Py_ssize_t)w[2];
    program->steps = calloc((size_t)program->n_steps + 1, sizeof(Step));
    program->lanes = calloc((size_t)program->n_lanes + 1, sizeof(Lane));
    program->segs = calloc((size_t)program->n_segs + 1, sizeof(Seg));
    if (!program->steps || !program->lanes || !program->segs) {
        program_free(program);
        PyErr_NoMemory();
        return -1;
    }
    const int64_t *step_words = w + 3, *lane_words = step_words + STEP_WORDS * w[0];
    const int64_t *seg_words = lane_words + LANE_WORDS * w[1];
    for (Py_ssize_t i = 0; i < program->n_segs; i++) {
        const int64_t *s = seg_words + SEG_WORDS * i;
        if (s[0] < 0 || s[0] >= n_buffers || s[1] < 0 || s[2] < 1 || s[1] > buffers[s[0]].len ||
            s[2] > buffers[s[0]].len - s[1])
            return bad_program(program, "a segment outside its buffer, or empty");
        program->segs[i] = (Seg){(char *)buffers[s[0]].buf + s[1], (size_t)s[2]};
    }
    for (Py_ssize_t i = 0; i < program->n_lanes; i++) {
        const int64_t *l = lane_words + LANE_WORDS * i;
        if (l[0] < 0 || l[0] > INT32_MAX || (l[1] != RECEIVE && l[1] != SEND) || l[2] < 0 || l[3] < 1 ||
            l[2] > program->n_segs || l[3] > program->n_segs - l[2])
            return bad_program(program, "a lane with a bad fd, direction or segments");
        program->lanes[i] = (Lane){(int)l[0], (int)l[1], (Py_ssize_t)l[2], (Py_ssize_t)l[3], 0, 0};
    }
    for (Py_ssize_t i = 0; i < program->n_steps; i++) {
        const int64_t *s = step_words + STEP_WORDS * i;
        if (s[0] < 0 || s[1] < 0 || s[0] > program->n_lanes || s[1] > program->n_lanes - s[0])
            return bad_program(program, "a step with bad lanes");
        if (s[2] != NO_ACTION) {
            if ((s[2] != ADD_INT64 && s[2] != COPY) || s[3] < 0 || s[4] < 0 || s[3] >= program->n_segs ||
                s[4] >= program->n_segs)
                return bad_program(program, "a step with a bad action");
            size_t a = program->segs[s[3]].size, b = program->segs[s[4]].size;
            if (a != b || (s[2] == ADD_INT64 && a % sizeof(int64_t)))
                return bad_program(program, "an action on segments of unlike sizes");
        }
        program->steps[i] = (Step){(Py_ssize_t)s[0], (Py_ssize_t)s[1], (int)s[2], (Py_ssize_t)s[3], (Py_ssize_t)s[4]};
    }
    return 0;
}

static Py_ssize_t widest_step(const Program *program)
{
    Py_ssize_t widest = 1;
    for (Py_ssize_t i = 0; i < program->n_steps; i++)
        widest = program->steps[i].count > widest ? program->steps[i].count : widest;
    return widest;
}

enum { LANE_DONE = 1, LANE_WAITS = 0 };

/* Move a lane's bytes until it is done or would block; *moved is set when any byte moved. */
static int lane_progress(Runner *runner, Lane *lane, const Seg *segs, int *moved)
{
    while (lane->at < lane->count) {
        const Seg *seg = &segs[lane->first + lane->at];
        ssize_t n = lane->direction == SEND
                        ? send(lane->fd, seg->buf + lane->done, seg->size - lane->done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(lane->fd, seg->buf + lane->done, seg->size - lane->done, MSG_DONTWAIT);
        if (n > 0) {
            *moved = 1;
            lane->done += (size_t)n;
            if (lane->done == seg->size)
                lane->at++, lane->done = 0;
        } else if (n == 0) { /* a receive: the peer closed (a send of a non-empty segment never returns 0) */
            *runner->where = lane->fd;
            return CLOSED;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return LANE_WAITS;
        } else if (errno != EINTR) {
            *runner->where = lane->fd;
            return FAILED;
        } else if (interrupted(&runner->state)) {
            return SIGNALLED;
        }
    }
    return LANE_DONE;
}

static void int64_add(char *into, const char *from, size_t size)
{
    for (size_t i = 0; i < size; i += sizeof(int64_t)) {
        int64_t a, b;
        memcpy(&a, into + i, sizeof a);
        memcpy(&b, from + i, sizeof b);
        a = (int64_t)((uint64_t)a + (uint64_t)b); /* wraps as MPI_INT64_T sums do, never undefined */
        memcpy(into + i, &a, sizeof a);
    }
}

static int run_step(Runner *runner, const Program *program, const Step *step)
{
    Lane *lanes = program->lanes + step->first;
    for (Py_ssize_t i = 0; i < step->count; i++)
        lanes[i].at = 0, lanes[i].done = 0;
    int64_t last_moved = fb_now_ns();
    for (;;) {
        int moved = 0, waiting = 0, stalled_fd = -1;
        for (Py_ssize_t i = 0; i < step->count; i++) {
            if (lanes[i].at == lanes[i].count)
                continue;
            int outcome = lane_progress(runner, &lanes[i], program->segs, &moved);
            if (outcome < 0)
                return outcome;
            if (outcome == LANE_WAITS) {
                runner->polls[waiting++] = (struct pollfd){lanes[i].fd, lanes[i].direction == SEND ? POLLOUT : POLLIN, 0};
                stalled_fd = stalled_fd < 0 ? lanes[i].fd : stalled_fd;
            }
        }
        if (!waiting)
            break;
        int64_t now = fb_now_ns();
        if (moved)
            last_moved = now;
        if (due(now, &runner->checked, &runner->state))
            return SIGNALLED;
        int n = poll(runner->polls, (nfds_t)waiting, (int)(SIGNAL_CHECK_NS / 1000000));
        if (n < 0 && errno != EINTR) {
            *runner->where = stalled_fd;
            return FAILED;
        }
        if (n <= 0) {
            if (interrupted(&runner->state))
                return SIGNALLED;
            if (runner->timeout_ns > 0 && fb_now_ns() - last_moved >= runner->timeout_ns) {
                *runner->where = stalled_fd;
                errno = EAGAIN;
                return FAILED;
            }
        }
    }
    if (step->action == ADD_INT64)
        int64_add(program->segs[step->a].buf, program->segs[step->b].buf, program->segs[step->a].size);
    else if (step->action == COPY)
        memcpy(program->segs[step->a].buf, program->segs[step->b].buf, program->segs[step->a].size);
    return OK;
}

static int run_program(Runner *runner, const Program *program)
{
    for (Py_ssize_t i = 0; i < program->n_steps; i++) {
        int outcome = run_step(runner, program, &program->steps[i]);
        if (outcome != OK)
            return outcome;
    }
    return OK;
}

/* The tuple of buffers a program's segments index, each taken writable. Returns the count, or -1. */
static Py_ssize_t take_buffers(PyObject *tuple, Py_buffer **out)
{
    if (!PyTuple_Check(tuple)) {
        PyErr_SetString(PyExc_TypeError, "buffers must be a tuple");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    Py_buffer *views = calloc((size_t)n + 1, sizeof *views);
    if (!views) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(tuple, i), &views[i], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)) {
            while (i--)
                PyBuffer_Release(&views[i]);
            free(views);
            return -1;
        }
    }
    *out = views;
    return n;
}

static void drop_buffers(Py_buffer *views, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
    free(views);
}

static int64_t seconds_to_ns(double seconds)
{
    return seconds > 0 ? (int64_t)(seconds * 1e9) : 0;
}

PyDoc_STRVAR(congestion_canary_doc,
             "congestion_canary(buffers, before, sample, after, iterations, times, timeout, where)\n--\n\n"
             "A canary's part of a congestion run: the program `before` once (a congested phase's start: the\n"
             "leader waits for every group's \"started\", the canaries meet), `sample` `iterations` times back to\n"
             "back, each one's ns written to the int64 buffer `times`, then `after` once (the canaries meet, the\n"
             "leader sends \"stop\"). A wait with no byte moved for `timeout` s fails; `where[0]`: the fd.");

static PyObject *congestion_canary(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *tuple;
    Py_buffer code[3], times, where;
    Py_ssize_t iterations;
    double timeout;
    if (!PyArg_ParseTuple(args, "Oy*y*y*nw*dw*", &tuple, &code[0], &code[1], &code[2], &iterations, &times, &timeout,
                          &where))
        return NULL;
    PyObject *result = NULL;
    Program programs[3] = {{0}};
    Py_buffer *views = NULL;
    Py_ssize_t n_views = -1;
    if (iterations < 0 || check_times(&times, iterations, 1) || where.len < (Py_ssize_t)sizeof(int64_t)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "iterations < 0 or no room in `where`");
        goto done;
    }
    if ((n_views = take_buffers(tuple, &views)) < 0)
        goto done;
    for (int p = 0; p < 3; p++)
        if (program_decode(&code[p], views, n_views, &programs[p]))
            goto done;
    Py_ssize_t widest = 1;
    for (int p = 0; p < 3; p++)
        widest = widest_step(&programs[p]) > widest ? widest_step(&programs[p]) : widest;
    struct pollfd *polls = calloc((size_t)widest, sizeof *polls);
    if (!polls) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *samples = times.buf;
    Runner runner = {polls, seconds_to_ns(timeout), 0, NULL, where.buf};
    *runner.where = -1;
    runner.state = PyEval_SaveThread();
    runner.checked = fb_now_ns();
    int outcome = run_program(&runner, &programs[0]);
    if (outcome == OK) {
        int64_t last = fb_now_ns();
        for (Py_ssize_t i = 0; i < iterations && outcome == OK; i++) {
            outcome = run_program(&runner, &programs[1]);
            fb_stamp(samples, i, &last);
        }
    }
    if (outcome == OK)
        outcome = run_program(&runner, &programs[2]);
    result = leave(outcome, runner.state);
    free(polls);
done:
    for (int p = 0; p < 3; p++)
        program_free(&programs[p]);
    if (n_views >= 0)
        drop_buffers(views, n_views);
    release((Py_buffer *[]){&code[0], &code[1], &code[2], &times, &where, NULL});
    return result;
}

/* The first rank's look at its link to the canary leader: has "stop" come? 1 yes, 0 not yet, or an outcome. */
static int stop_arrived(Runner *runner, int stop_fd)
{
    char byte;
    for (;;) {
        ssize_t n = recv(stop_fd, &byte, 1, MSG_DONTWAIT);
        if (n == 1)
            return 1;
        if (n == 0) {
            *runner->where = stop_fd;
            return CLOSED;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        if (errno != EINTR) {
            *runner->where = stop_fd;
            return FAILED;
        }
        if (interrupted(&runner->state))
            return SIGNALLED;
    }
}

PyDoc_STRVAR(congestion_congestor_doc,
             "congestion_congestor(buffers, iteration, gather, release, started, decision, first, stop_fd,\n"
             "                     agree_every, timeout, stats, where)\n--\n\n"
             "A congestor's pattern (the program `iteration`) again and again until the canary leader says stop.\n"
             "After the first iteration and every `agree_every`-th the group agrees: `gather` (every rank but the\n"
             "first tells it it got here), the first rank reads \"stop\" from `stop_fd` if it came and writes the\n"
             "decision to byte 0 of buffer `decision`, `release` (it sends that byte to each, who read it there).\n"
             "After the first agreement the first rank runs `started` (\"started\" to the leader). stats[0]: the\n"
             "iterations after the first, up to the agreement that stopped; stats[1]: the ns from the end of the\n"
             "first iteration to the end of that agreement.");

static PyObject *congestion_congestor(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *tuple;
    Py_buffer code[4], stats, where;
    Py_ssize_t decision_index, agree_every;
    int first, stop_fd;
    double timeout;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*npindw*w*", &tuple, &code[0], &code[1], &code[2], &code[3],
                          &decision_index, &first, &stop_fd, &agree_every, &timeout, &stats, &where))
        return NULL;
    PyObject *result = NULL;
    Program programs[4] = {{0}};
    Py_buffer *views = NULL;
    Py_ssize_t n_views = -1;
    if (agree_every < 1 || stats.len < 2 * (Py_ssize_t)sizeof(int64_t) || where.len < (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "agree_every < 1, or no room in `stats` or `where`");
        goto done;
    }
    if ((n_views = take_buffers(tuple, &views)) < 0)
        goto done;
    if (decision_index < 0 || decision_index >= n_views || views[decision_index].len < 1) {
        PyErr_SetString(PyExc_ValueError, "no decision buffer");
        goto done;
    }
    for (int p = 0; p < 4; p++)
        if (program_decode(&code[p], views, n_views, &programs[p]))
            goto done;
    Py_ssize_t widest = 1;
    for (int p = 0; p < 4; p++)
        widest = widest_step(&programs[p]) > widest ? widest_step(&programs[p]) : widest;
    struct pollfd *polls = calloc((size_t)widest, sizeof *polls);
    if (!polls) {
        PyErr_NoMemory();
        goto done;
    }
    char *decision = views[decision_index].buf;
    int64_t *out = stats.buf;
    Runner runner = {polls, seconds_to_ns(timeout), 0, NULL, where.buf};
    *runner.where = -1;
    runner.state = PyEval_SaveThread();
    runner.checked = fb_now_ns();
    int outcome = OK, stop_seen = 0;
    int64_t done_iterations = 0, started_ns = 0;
    for (;;) {
        if ((outcome = run_program(&runner, &programs[0])) != OK)
            break;
        if (done_iterations++ % agree_every)
            continue;
        if (done_iterations == 1)
            started_ns = fb_now_ns();
        if ((outcome = run_program(&runner, &programs[1])) != OK)
            break;
        if (first) {
            if (done_iterations > 1 && !stop_seen) { /* no stop can come before "started" was sent */
                int arrived = stop_arrived(&runner, stop_fd);
                if (arrived < 0) {
                    outcome = arrived;
                    break;
                }
                stop_seen = arrived;
            }
            decision[0] = (char)stop_seen;
        }
        if ((outcome = run_program(&runner, &programs[2])) != OK)
            break;
        if (done_iterations == 1) {
            if (first && (outcome = run_program(&runner, &programs[3])) != OK)
                break;
        } else if (decision[0]) {
            out[1] = fb_now_ns() - started_ns;
            out[0] = done_iterations - 1;
            break;
        }
    }
    result = leave(outcome, runner.state);
    free(polls);
done:
    for (int p = 0; p < 4; p++)
        program_free(&programs[p]);
    if (n_views >= 0)
        drop_buffers(views, n_views);
    release((Py_buffer *[]){&code[0], &code[1], &code[2], &code[3], &stats, &where, NULL});
    return result;
}

static PyMethodDef methods[] = {
    {"pingpong", pingpong, METH_VARARGS, pingpong_doc},
    {"window", window, METH_VARARGS, window_doc},
    {"congestion_canary", congestion_canary, METH_VARARGS, congestion_canary_doc},
    {"congestion_congestor", congestion_congestor, METH_VARARGS, congestion_congestor_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fabricbench.transports._tcploop",
    .m_doc = "The tcp transport's ping-pong, streaming and congestion loops in C, with the GIL released.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__tcploop(void)
{
    return PyModule_Create(&module);
}
