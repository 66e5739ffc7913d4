/* What every C loop of fabricbench shares: the clock, the per-iteration stamp and the error buffer.
 *
 * Each loop is a shared object of its own, so everything here is static inline and no symbol crosses between
 * them. cbuild compiles every loop with this folder on the include path and this file's bytes in the cache key:
 * a change here rebuilds every loop. A loop defines its feature-test macro (_GNU_SOURCE, _POSIX_C_SOURCE) before
 * its first include, this one's included.
 *
 * The clock is CLOCK_MONOTONIC in ns, the clock of Python's time.perf_counter_ns, so C and Python samples are
 * read alike.
 */
#ifndef FB_RUNTIME_H
#define FB_RUNTIME_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline int64_t fb_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* One sample: the ns from `*last` to now into times[i]; now becomes `*last` and is returned (a caller that reads
 * the clock for something else takes it from here). Only the operation lies between the two readings:
 * - back to back, `*last` is the previous sample's stamp, so nothing between two samples goes untimed;
 * - timed alone, `*last` is a fb_now_ns() taken just before the operation. */
static inline int64_t fb_stamp(int64_t *times, int64_t i, int64_t *last)
{
    int64_t now = fb_now_ns();
    times[i] = now - *last;
    *last = now;
    return now;
}

/* One line, printf-formatted, into the caller's error buffer of `size` bytes; returns -1, what a loop's failing
 * function returns. */
#ifdef __GNUC__
__attribute__((format(printf, 3, 4)))
#endif
static inline int fb_fail(char *error, size_t size, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(error, size, format, args);
    va_end(args);
    return -1;
}

/* fb_fail into a handle's own buffer, its `error` member (a char array). */
#define FB_FAIL(handle, ...) fb_fail((handle)->error, sizeof (handle)->error, __VA_ARGS__)

#endif
