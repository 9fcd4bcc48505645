/* Preloaded *before* libfaketime.so.1 into skewed nodes (chaos_tests/backends/preload.py;
 * the docker image builds the same file, deploy/build-image.sh):
 *   LD_PRELOAD="faketime_fix.so libfaketime.so.1" DONT_FAKE_MONOTONIC=1
 *
 * Debian bookworm's libfaketime 0.9.10 with DONT_FAKE_MONOTONIC=1 breaks two monotonic-clock
 * waits that CPython 3.11 depends on; with that setting they are not meant to be faked at all,
 * so this shim sends them straight to the kernel / glibc and everything else on to libfaketime:
 *
 * 1. clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...) fails with EINVAL.  That is
 *    time.sleep(): any thread that sleeps dies (pysyncobj's tick thread did).
 * 2. pthread_cond_timedwait on a condvar whose clock is CLOCK_MONOTONIC wakes late: CPython's
 *    GIL hand-off uses one, and every trio.to_thread.run_sync took ~30 ms instead of ~0.3 ms
 *    (acks=all produce waits for an fsync in a worker thread: ~1 ack/s instead of ~60/s).
 *    Condvars on CLOCK_REALTIME still go through libfaketime (their deadline is in faked time).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*cns_fn)(clockid_t, int, const struct timespec *, struct timespec *);
typedef int (*ctw_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req,
                    struct timespec *rem) {
    if (clock_id == CLOCK_MONOTONIC || clock_id == CLOCK_MONOTONIC_RAW ||
        clock_id == CLOCK_BOOTTIME) {
        /* clock_nanosleep returns the error number, it does not set errno */
        long r = syscall(SYS_clock_nanosleep, clock_id, flags, req, rem);
        return r == 0 ? 0 : errno;
    }
    static cns_fn next;
    if (!next)
        next = (cns_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
    return next ? next(clock_id, flags, req, rem) : ENOSYS;
}

/* glibc >= 2.25 keeps a condvar's clock in bit 1 of __wrefs (set by pthread_condattr_setclock) */
#define COND_CLOCK_MONOTONIC_MASK 2u

int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex,
                           const struct timespec *abstime) {
    static ctw_fn libc_fn, next_fn;
    if (!libc_fn) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        if (libc)
            libc_fn = (ctw_fn)dlvsym(libc, "pthread_cond_timedwait", "GLIBC_2.3.2");
    }
    if (!next_fn)
        next_fn = (ctw_fn)dlvsym(RTLD_NEXT, "pthread_cond_timedwait", "GLIBC_2.3.2");
    if (libc_fn && (cond->__data.__wrefs & COND_CLOCK_MONOTONIC_MASK))
        return libc_fn(cond, mutex, abstime);
    return next_fn ? next_fn(cond, mutex, abstime) : ENOSYS;
}
