/*
 * rdmc's shim over libfabric 1.x: the calls the `ofi` transport needs, as
 * plain functions with flat argument and result structs.
 *
 * libfabric's data-path calls (fi_recv, fi_writedata, fi_cq_read, ...) are
 * `static inline` functions dispatching through the fid's operation tables,
 * so Rust cannot link against them directly; and its structs differ between
 * releases. This file is compiled against the installed <rdma/fabric.h> by
 * build.rs (the `cc` crate), so only these prototypes — mirrored by hand in
 * `ffi.rs` — are the Rust/C contract. Only the stable 1.x API is used, so
 * it builds against 1.17 (Debian bookworm) and 2.x alike.
 *
 * Conventions: every function returns 0 or a positive count on success and
 * a negative libfabric error code (-FI_E...) on failure; objects travel as
 * opaque pointers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

/* Mode bits as the Rust side sees them (see ffi.rs). */
#define RDMC_MR_LOCAL       (1u << 0)
#define RDMC_MR_VIRT_ADDR   (1u << 1)
#define RDMC_MR_ALLOCATED   (1u << 2)
#define RDMC_MR_PROV_KEY    (1u << 3)
#define RDMC_MR_OTHER       (1u << 4)
#define RDMC_MODE_CONTEXT   (1u << 0)
#define RDMC_MODE_RX_CQ_DATA (1u << 1)
#define RDMC_MODE_OTHER     (1u << 2)

/* What the transport needs to know of the fi_info chosen. */
struct rdmc_info {
    uint32_t mr_mode;      /* RDMC_MR_* */
    uint32_t mode;         /* RDMC_MODE_* */
    uint64_t raw_mr_mode;
    uint64_t raw_mode;
    uint64_t cq_data_size;
    uint64_t tx_size;
    uint64_t rx_size;
    uint64_t max_msg_size;
    uint64_t mr_key_size;
    int32_t thread_safe;
    char provider[64];
    char fabric[128];
    char domain[128];
};

/* One completion, flattened (struct fi_cq_data_entry). */
struct rdmc_cqe {
    void *op_context;
    uint64_t flags;
    uint64_t len;
    uint64_t data;
};

/* One error completion, flattened (struct fi_cq_err_entry). */
struct rdmc_cqerr {
    void *op_context;
    uint64_t flags;
    int32_t err;
    int32_t prov_errno;
    char message[160];
};

/* One EQ event, flattened (struct fi_eq_cm_entry). */
struct rdmc_eqe {
    uint32_t event;        /* 1 connreq, 2 connected, 3 shutdown, 0 other */
    void *fid_context;     /* the context given when the fid was opened */
    struct fi_info *info;  /* connreq only: to be passed to rdmc_ep_open / rdmc_reject */
    uint64_t data_len;     /* connreq: bytes of connection data copied out */
    int32_t err;           /* error events: the error code (positive) */
};

static uint32_t map_mr_mode(uint64_t m) {
    uint32_t out = 0;
    if (m & FI_MR_LOCAL) out |= RDMC_MR_LOCAL;
    if (m & FI_MR_VIRT_ADDR) out |= RDMC_MR_VIRT_ADDR;
    if (m & FI_MR_ALLOCATED) out |= RDMC_MR_ALLOCATED;
    if (m & FI_MR_PROV_KEY) out |= RDMC_MR_PROV_KEY;
    if (m & ~(uint64_t)(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY))
        out |= RDMC_MR_OTHER;
    return out;
}

static uint32_t map_mode(uint64_t m) {
    uint32_t out = 0;
    if (m & FI_CONTEXT) out |= RDMC_MODE_CONTEXT;
    if (m & FI_RX_CQ_DATA) out |= RDMC_MODE_RX_CQ_DATA;
    /* Every context has room for an fi_context2 (which contains fi_context). */
    if (m & FI_CONTEXT2) out |= RDMC_MODE_CONTEXT;
    if (m & ~(uint64_t)(FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA)) out |= RDMC_MODE_OTHER;
    return out;
}

static void copy_str(char *dst, size_t cap, const char *src) {
    if (!src) src = "";
    strncpy(dst, src, cap - 1);
    dst[cap - 1] = 0;
}

/*
 * fi_getinfo for FI_EP_MSG endpoints with messages, RMA writes and remote CQ
 * data, asking for verbs-like modes (the application supports them all).
 * `node`: the local address to bind (FI_SOURCE), or NULL. `provider`: a
 * provider name, or NULL for any.
 */
int rdmc_getinfo(const char *provider, const char *node, struct fi_info **out,
                 struct rdmc_info *summary) {
    struct fi_info *hints = fi_allocinfo();
    if (!hints) return -FI_ENOMEM;
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->cq_data_size = 4;
    hints->addr_format = FI_FORMAT_UNSPEC; /* IPv4 or IPv6, as `node` says */
    if (provider) hints->fabric_attr->prov_name = strdup(provider);
    struct fi_info *info = NULL;
    int ret = fi_getinfo(FI_VERSION(1, 5), node, NULL, node ? FI_SOURCE : 0, hints, &info);
    fi_freeinfo(hints);
    if (ret) return ret;
    if (!info) return -FI_ENODATA;
    memset(summary, 0, sizeof *summary);
    summary->raw_mr_mode = (uint64_t)info->domain_attr->mr_mode;
    summary->raw_mode = info->mode;
    summary->mr_mode = map_mr_mode(summary->raw_mr_mode);
    summary->mode = map_mode(info->mode);
    summary->cq_data_size = info->domain_attr->cq_data_size;
    summary->tx_size = info->tx_attr->size;
    summary->rx_size = info->rx_attr->size;
    summary->max_msg_size = info->ep_attr->max_msg_size;
    summary->mr_key_size = info->domain_attr->mr_key_size;
    summary->thread_safe = info->domain_attr->threading == FI_THREAD_SAFE;
    copy_str(summary->provider, sizeof summary->provider, info->fabric_attr->prov_name);
    copy_str(summary->fabric, sizeof summary->fabric, info->fabric_attr->name);
    copy_str(summary->domain, sizeof summary->domain, info->domain_attr->name);
    *out = info;
    return 0;
}

/* Add the verbs-like MR modes to an fi_info before the domain is opened
 * (a test hook: providers built on libfabric's utility MR map honour them). */
void rdmc_info_force_strict_mr(struct fi_info *info) {
    info->domain_attr->mr_mode |= FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
}

void rdmc_freeinfo(struct fi_info *info) { fi_freeinfo(info); }

const char *rdmc_strerror(int err) { return fi_strerror(err < 0 ? -err : err); }

int rdmc_close(void *fid) { return fi_close((struct fid *)fid); }

/* Fabric, domain, event queue and completion queue (both waited on
 * through a file descriptor, returned in *fd). */
int rdmc_fabric_domain(struct fi_info *info, struct fid_fabric **fabric, struct fid_domain **domain) {
    int ret = fi_fabric(info->fabric_attr, fabric, NULL);
    if (ret) return ret;
    ret = fi_domain(*fabric, info, domain, NULL);
    if (ret) { fi_close(&(*fabric)->fid); *fabric = NULL; }
    return ret;
}

int rdmc_eq_open(struct fid_fabric *fabric, struct fid_eq **eq, int *fd) {
    struct fi_eq_attr attr = { .size = 256, .wait_obj = FI_WAIT_FD };
    int ret = fi_eq_open(fabric, &attr, eq, NULL);
    if (ret) return ret;
    ret = fi_control(&(*eq)->fid, FI_GETWAIT, fd);
    if (ret) { fi_close(&(*eq)->fid); *eq = NULL; }
    return ret;
}

int rdmc_cq_open(struct fid_domain *domain, uint64_t size, struct fid_cq **cq, int *fd) {
    struct fi_cq_attr attr = {
        .size = size, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD,
    };
    int ret = fi_cq_open(domain, &attr, cq, NULL);
    if (ret) return ret;
    ret = fi_control(&(*cq)->fid, FI_GETWAIT, fd);
    if (ret) { fi_close(&(*cq)->fid); *cq = NULL; }
    return ret;
}

/* A listening passive endpoint; its address is copied to name (namelen bytes at most). */
int rdmc_pep_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_eq *eq,
                  struct fid_pep **pep, void *name, size_t *namelen) {
    int ret = fi_passive_ep(fabric, info, pep, NULL);
    if (ret) return ret;
    ret = fi_pep_bind(*pep, &eq->fid, 0);
    if (!ret) ret = fi_listen(*pep);
    if (!ret) ret = fi_getname(&(*pep)->fid, name, namelen);
    if (ret) { fi_close(&(*pep)->fid); *pep = NULL; }
    return ret;
}

/* An active endpoint bound to the EQ and the CQ (both directions), enabled.
 * `context` comes back in EQ events for it. `dest` (`dest_len` bytes, the
 * peer's passive endpoint address) is given for an endpoint that will
 * connect, NULL for one opened from a connection request: connection-
 * managed providers resolve the route when the endpoint is created (verbs:
 * rdma_resolve_addr, EINVAL without a destination), not at fi_connect. */
int rdmc_ep_open(struct fid_domain *domain, struct fi_info *info, const void *dest,
                 size_t dest_len, struct fid_eq *eq, struct fid_cq *cq, void *context,
                 struct fid_ep **ep) {
    struct fi_info *with_dest = NULL;
    if (dest) {
        with_dest = fi_dupinfo(info);
        if (!with_dest) return -FI_ENOMEM;
        free(with_dest->dest_addr);
        with_dest->dest_addr = malloc(dest_len);
        if (!with_dest->dest_addr) { fi_freeinfo(with_dest); return -FI_ENOMEM; }
        memcpy(with_dest->dest_addr, dest, dest_len);
        with_dest->dest_addrlen = dest_len;
        info = with_dest;
    }
    int ret = fi_endpoint(domain, info, ep, context);
    if (with_dest) fi_freeinfo(with_dest);
    if (ret) return ret;
    ret = fi_ep_bind(*ep, &eq->fid, 0);
    if (!ret) ret = fi_ep_bind(*ep, &cq->fid, FI_TRANSMIT | FI_RECV);
    if (!ret) ret = fi_enable(*ep);
    if (ret) { fi_close(&(*ep)->fid); *ep = NULL; }
    return ret;
}

int rdmc_connect(struct fid_ep *ep, const void *addr, const void *param, size_t len) {
    return fi_connect(ep, addr, param, len);
}

int rdmc_accept(struct fid_ep *ep) { return fi_accept(ep, NULL, 0); }

int rdmc_reject(struct fid_pep *pep, struct fi_info *info) {
    return fi_reject(pep, info->handle, NULL, 0);
}

int rdmc_shutdown(struct fid_ep *ep) { return fi_shutdown(ep, 0); }

/* Register buf..buf+len with `access` (RDMC_ACCESS_* = FI_* bits passed
 * through); `requested_key` is used unless the provider picks keys. */
int rdmc_mr_reg(struct fid_domain *domain, void *buf, size_t len, uint64_t access,
                uint64_t requested_key, struct fid_mr **mr, void **desc, uint64_t *key) {
    int ret = fi_mr_reg(domain, buf, len, access, 0, requested_key, 0, mr, NULL);
    if (ret) return ret;
    *desc = fi_mr_desc(*mr);
    *key = fi_mr_key(*mr);
    if (*key == FI_KEY_NOTAVAIL) { fi_close(&(*mr)->fid); *mr = NULL; return -FI_ENOKEY; }
    return 0;
}

uint64_t rdmc_access_local(void) { return FI_SEND | FI_RECV | FI_WRITE; }
uint64_t rdmc_access_remote_write(void) { return FI_REMOTE_WRITE; }
/* Only read locally, as the source of sends and writes (may be read-only memory). */
uint64_t rdmc_access_source(void) { return FI_SEND | FI_WRITE; }

ssize_t rdmc_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, void *context) {
    return fi_recv(ep, buf, len, desc, 0, context);
}

ssize_t rdmc_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, void *context) {
    return fi_send(ep, buf, len, desc, 0, context);
}

ssize_t rdmc_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
                       uint64_t addr, uint64_t key, void *context) {
    return fi_writedata(ep, buf, len, desc, data, 0, addr, key, context);
}

/* Up to `count` completions into `out`; -FI_EAGAIN when none, -FI_EAVAIL
 * when an error completion is next (read it with rdmc_cq_readerr). */
ssize_t rdmc_cq_read(struct fid_cq *cq, struct rdmc_cqe *out, size_t count) {
    struct fi_cq_data_entry entries[64];
    if (count > 64) count = 64;
    ssize_t n = fi_cq_read(cq, entries, count);
    for (ssize_t i = 0; i < n; i++) {
        out[i].op_context = entries[i].op_context;
        out[i].flags = entries[i].flags;
        out[i].len = entries[i].len;
        out[i].data = entries[i].data;
    }
    return n;
}

ssize_t rdmc_cq_readerr(struct fid_cq *cq, struct rdmc_cqerr *out) {
    struct fi_cq_err_entry err;
    memset(&err, 0, sizeof err);
    ssize_t n = fi_cq_readerr(cq, &err, 0);
    if (n < 0) return n;
    out->op_context = err.op_context;
    out->flags = err.flags;
    out->err = err.err;
    out->prov_errno = err.prov_errno;
    const char *msg = fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0);
    copy_str(out->message, sizeof out->message, msg ? msg : fi_strerror(err.err));
    return n;
}

/* One EQ event. Connection data of a connreq is copied to data (up to cap). */
ssize_t rdmc_eq_read(struct fid_eq *eq, struct rdmc_eqe *out, void *data, size_t cap) {
    union {
        struct fi_eq_cm_entry cm;
        uint8_t bytes[sizeof(struct fi_eq_cm_entry) + 256];
    } buf;
    uint32_t event = 0;
    memset(out, 0, sizeof *out);
    ssize_t n = fi_eq_read(eq, &event, &buf, sizeof buf, 0);
    if (n == -FI_EAVAIL) {
        struct fi_eq_err_entry err;
        memset(&err, 0, sizeof err);
        ssize_t m = fi_eq_readerr(eq, &err, 0);
        if (m < 0) return m;
        out->event = 4;
        out->fid_context = err.fid ? err.fid->context : NULL;
        out->err = err.err;
        return 1;
    }
    if (n < 0) return n;
    out->fid_context = buf.cm.fid ? buf.cm.fid->context : NULL;
    switch (event) {
    case FI_CONNREQ: {
        out->event = 1;
        out->info = buf.cm.info;
        size_t len = (size_t)n > sizeof(struct fi_eq_cm_entry) ? (size_t)n - sizeof(struct fi_eq_cm_entry) : 0;
        if (len > cap) len = cap;
        memcpy(data, buf.cm.data, len);
        out->data_len = len;
        break;
    }
    case FI_CONNECTED: out->event = 2; break;
    case FI_SHUTDOWN: out->event = 3; break;
    default: out->event = 0; break;
    }
    return 1;
}

/* fi_trywait on the CQ and the EQ: 0 when both are empty and their fds
 * will signal the next event, -FI_EAGAIN when they must be read first. */
int rdmc_trywait(struct fid_fabric *fabric, struct fid_cq *cq, struct fid_eq *eq) {
    struct fid *fids[2] = { &cq->fid, &eq->fid };
    return fi_trywait(fabric, fids, 2);
}
