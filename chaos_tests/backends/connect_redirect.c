/* Preloaded into every node of the local backend (chaos_tests/backends/local.py).
 *
 * Node N (RAFKA_CHAOS_NODE=N) dials node M at M's own address 127.0.0.<10+M>, the address M
 * advertises in the metadata (replica fetches, AlterPartition, client redirects all use it).
 * To put every node-to-node connection through the harness's link proxy N -> M, connect()
 * to 127.0.0.<10+M>:port (M in 1..200, M != N) is rewritten to 127.1.N.M:port, where the
 * proxy for that directed link listens.  Every other address is left alone.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn next;
    static int self = -1;
    if (!next)
        next = (connect_fn)dlsym(RTLD_NEXT, "connect");
    if (!next) {
        errno = ENOSYS;
        return -1;
    }
    if (self < 0) {
        const char *s = getenv("RAFKA_CHAOS_NODE");
        self = s ? atoi(s) : 0;
    }
    if (self > 0 && self <= 255 && addr && addr->sa_family == AF_INET &&
        len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        uint32_t a = ntohl(in->sin_addr.s_addr);
        int dst = (int)(a & 0xff) - 10;
        if ((a >> 8) == 0x7f0000u && dst >= 1 && dst <= 200 && dst != self) {
            struct sockaddr_in r = *in;
            r.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | ((uint32_t)self << 8) |
                                      (uint32_t)dst);
            return next(fd, (const struct sockaddr *)&r, sizeof r);
        }
    }
    return next(fd, addr, len);
}
