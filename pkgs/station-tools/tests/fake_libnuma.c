/* A libnuma stand-in with a small fake kernel, for the binding's paths this machine cannot produce:
 * several nodes, a cpuset that leaves one out, a memoryless node, an allocation or a system call that
 * fails, a kernel that reports another policy than the one set.  tests/test_numa_errors.py builds it with
 * the C compiler and points STATION_LIBNUMA at it.
 *
 * It exports the functions vllm_station.host.numa declares, with libnuma's signatures.  The fake kernel
 * keeps one memory policy and checks set_mempolicy/get_mempolicy's `maxnode` the way Linux does
 * (mm/mempolicy.c: get_nodes() drops the last bit and reads BITS_TO_LONGS(maxnode - 1) longs;
 * kernel_get_mempolicy() refuses maxnode < nr_node_ids, copy_nodes_to_user() writes ALIGN(maxnode - 1, 64)
 * bits).  Every node mask it hands out holds exactly nr_node_ids = 64 bits (one long), as libnuma's
 * numa_allocate_nodemask() holds the possible nodes; where Linux would read or write past that buffer,
 * the fake fails with EFAULT instead.
 *
 * Configuration, read from the environment at every call (unset: the default):
 *   FAKE_NUMA_AVAILABLE    numa_available()'s answer (0; -1: a kernel without NUMA support)
 *   FAKE_NUMA_MAX_NODE     numa_max_node() (3)
 *   FAKE_NUMA_ALLOWED      the cpuset's memory nodes, a bit mask such as 0x5 (0xf)
 *   FAKE_NUMA_MEMORYLESS   nodes without memory, a bit mask (0)
 *   FAKE_NUMA_FAIL         one function that fails: numa_allocate_nodemask, numa_get_mems_allowed
 *                          (ENOMEM), numa_node_size64 (ENOENT), get_mempolicy, set_mempolicy (EPERM)
 *   FAKE_NUMA_REPORT_MODE  get_mempolicy() reports this mode instead of the one set
 *   FAKE_NUMA_REPORT_NODES ... and these nodes (a bit mask)
 * Node n has (n + 1) GiB, n * 256 MiB of it free.  numa_available() (called once each time the binding
 * opens the library) also resets the fake kernel's policy to MPOL_DEFAULT.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct bitmask {
    unsigned long size;
    unsigned long *maskp;
};

#define NR_NODE_IDS 64UL
#define MPOL_DEFAULT 0
#define MPOL_BIND 2
#define MPOL_MAX 7
#define MPOL_MODE_FLAGS ((1 << 15) | (1 << 14) | (1 << 13))

static int policy_mode = MPOL_DEFAULT;
static unsigned long policy_nodes = 0;

static const char *env(const char *name) {
    const char *value = getenv(name);
    return value != NULL && *value != '\0' ? value : NULL;
}

static long env_long(const char *name, long fallback) {
    const char *value = env(name);
    return value != NULL ? strtol(value, NULL, 0) : fallback;
}

static unsigned long env_mask(const char *name, unsigned long fallback) {
    const char *value = env(name);
    return value != NULL ? strtoul(value, NULL, 0) : fallback;
}

static int failing(const char *function) {
    const char *value = env("FAKE_NUMA_FAIL");
    return value != NULL && strcmp(value, function) == 0;
}

int numa_available(void) {
    policy_mode = MPOL_DEFAULT;
    policy_nodes = 0;
    return (int)env_long("FAKE_NUMA_AVAILABLE", 0);
}

int numa_max_node(void) { return (int)env_long("FAKE_NUMA_MAX_NODE", 3); }

int numa_num_configured_nodes(void) { return numa_max_node() + 1; }

int numa_num_possible_nodes(void) { return (int)NR_NODE_IDS; }

long long numa_node_size64(int node, long long *freep) {
    if (failing("numa_node_size64")) {
        errno = ENOENT;
        return -1;
    }
    if (node < 0 || node > numa_max_node()) {
        errno = EINVAL;
        return -1;
    }
    if (env_mask("FAKE_NUMA_MEMORYLESS", 0) & (1UL << node)) {
        if (freep != NULL) *freep = 0;
        return 0;
    }
    if (freep != NULL) *freep = (long long)node * (256LL << 20);
    return ((long long)node + 1) << 30;
}

static struct bitmask *new_mask(unsigned long bits) {
    struct bitmask *mask = malloc(sizeof *mask);
    if (mask == NULL) return NULL;
    mask->size = NR_NODE_IDS;
    mask->maskp = malloc(sizeof(unsigned long));
    if (mask->maskp == NULL) {
        free(mask);
        return NULL;
    }
    *mask->maskp = bits;
    return mask;
}

struct bitmask *numa_allocate_nodemask(void) {
    if (failing("numa_allocate_nodemask")) {
        errno = ENOMEM;
        return NULL;
    }
    return new_mask(0);
}

void numa_bitmask_free(struct bitmask *bmp) {
    if (bmp == NULL) return;
    free(bmp->maskp);
    free(bmp);
}

struct bitmask *numa_bitmask_setbit(struct bitmask *bmp, unsigned int n) {
    if (n < bmp->size) *bmp->maskp |= 1UL << n;
    return bmp;
}

int numa_bitmask_isbitset(const struct bitmask *bmp, unsigned int n) {
    return n < bmp->size && (*bmp->maskp >> n) & 1UL;
}

struct bitmask *numa_get_mems_allowed(void) {
    if (failing("numa_get_mems_allowed")) {
        errno = ENOMEM;
        return NULL;
    }
    return new_mask(env_mask("FAKE_NUMA_ALLOWED", 0xf));
}

long set_mempolicy(int mode, const unsigned long *nmask, unsigned long maxnode) {
    if (failing("set_mempolicy")) {
        errno = EPERM;
        return -1;
    }
    int plain = mode & ~MPOL_MODE_FLAGS;
    if (plain < 0 || plain >= MPOL_MAX) {
        errno = EINVAL;
        return -1;
    }
    unsigned long nodes = 0;
    if (nmask != NULL && maxnode > 1) {
        unsigned long bits = maxnode - 1;
        if (bits > NR_NODE_IDS) { /* Linux would read a second long, past the mask */
            errno = EFAULT;
            return -1;
        }
        nodes = *nmask;
        if (bits < NR_NODE_IDS) nodes &= (1UL << bits) - 1;
    }
    nodes &= env_mask("FAKE_NUMA_ALLOWED", 0xf);
    if (plain == MPOL_BIND && nodes == 0) {
        errno = EINVAL;
        return -1;
    }
    policy_mode = mode;
    policy_nodes = plain == MPOL_DEFAULT ? 0 : nodes;
    return 0;
}

long get_mempolicy(int *mode, unsigned long *nmask, unsigned long maxnode, void *addr, unsigned flags) {
    (void)addr;
    if (failing("get_mempolicy")) {
        errno = EPERM;
        return -1;
    }
    if (flags != 0) {
        errno = EINVAL;
        return -1;
    }
    if (nmask != NULL) {
        if (maxnode < NR_NODE_IDS) {
            errno = EINVAL;
            return -1;
        }
        if (maxnode - 1 > NR_NODE_IDS) { /* Linux would write past the mask */
            errno = EFAULT;
            return -1;
        }
        *nmask = env("FAKE_NUMA_REPORT_NODES") != NULL ? env_mask("FAKE_NUMA_REPORT_NODES", 0) : policy_nodes;
    }
    if (mode != NULL) *mode = (int)env_long("FAKE_NUMA_REPORT_MODE", policy_mode);
    return 0;
}
