/* The tcp transport's timed loops for ping-pong and one-way streaming, outside the interpreter.
 *
 * A Python loop adds the interpreter's cost to every message, and on a fast
 * loopback or a 100 Gb/s NIC that cost is a visible part of what gets
 * reported (README gives the figures). These loops make the same
 * system calls as fabricbench's Python loops, and as osu_latency and osu_bw
 * make over their fabric: one send and one receive per message, an 8-byte
 * CLOCK_MONOTONIC stamp per iteration (the clock of time.perf_counter_ns).
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
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>

enum { OK = 0, CLOSED = -1, FAILED = -2, SIGNALLED = -3 };

#define SIGNAL_CHECK_NS 50000000LL /* 50 ms */

static inline int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

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
    int64_t start = now_ns();
    for (;;) {
        struct pollfd ready = {stream->fd, events, 0};
        int n = poll(&ready, 1, (int)(SIGNAL_CHECK_NS / 1000000));
        if (n > 0)
            return OK;
        if (n < 0 && errno != EINTR)
            return FAILED;
        if (interrupted(state))
            return SIGNALLED;
        if (timeout_ns > 0 && now_ns() - start >= timeout_ns) {
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
    int64_t checked = now_ns();
    if (initiator) {
        int64_t last = checked;
        for (Py_ssize_t i = 0; i < iterations; i++) {
            if ((outcome = send_all(fd, send_buf, out_size, &state)) != OK)
                break;
            if ((outcome = recv_all(fd, recv_buf, in_size, &state)) != OK)
                break;
            int64_t now = now_ns();
            samples[i] = now - last;
            last = now;
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
            if (due(now_ns(), &checked, &state)) {
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
    int64_t checked = now_ns();
    unsigned count = 0;
    if (initiator) {
        int64_t last = checked;
        for (Py_ssize_t i = 0; i < iterations && outcome == OK; i++) {
            for (Py_ssize_t m = 0; m < messages && outcome == OK; m++)
                if ((outcome = stream_send(&stream, send_buf, out_size, &state)) == OK && (++count & 15) == 0 &&
                    due(now_ns(), &checked, &state))
                    outcome = SIGNALLED;
            if (outcome != OK || (outcome = stream_recv(&stream, ack_in_buf, 1, &state)) != OK)
                break;
            int64_t now = now_ns();
            samples[i] = now - last;
            last = now;
        }
    } else {
        for (Py_ssize_t i = 0; i < iterations && outcome == OK; i++) {
            for (Py_ssize_t m = 0; m < messages && outcome == OK; m++)
                if ((outcome = stream_recv(&stream, recv_buf, in_size, &state)) == OK && (++count & 15) == 0 &&
                    due(now_ns(), &checked, &state))
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

static PyMethodDef methods[] = {
    {"pingpong", pingpong, METH_VARARGS, pingpong_doc},
    {"window", window, METH_VARARGS, window_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fabricbench.transports._tcploop",
    .m_doc = "The tcp transport's ping-pong and streaming loops in C, with the GIL released.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__tcploop(void)
{
    return PyModule_Create(&module);
}
