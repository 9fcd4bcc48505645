/* Preloaded *before* libfaketime.so.1 in the rafka node image (LD_PRELOAD="this.so libfaketime").
 *
 * libfaketime 0.9.10 (Debian bookworm) with DONT_FAKE_MONOTONIC=1 fails every
 * clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...) with EINVAL, which is how CPython 3.11
 * implements time.sleep(): any thread that sleeps dies (pysyncobj's tick thread, for one).
 * Without DONT_FAKE_MONOTONIC the monotonic clock jumps with every live skew change instead.
 * So: sleeps on the monotonic / boottime clocks go straight to the kernel (they are not faked
 * anyway with DONT_FAKE_MONOTONIC=1); everything else goes on to libfaketime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

typedef int (*cns_fn)(clockid_t, int, const struct timespec *, struct timespec *);

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
