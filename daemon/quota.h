/* quota.h: what each uid holds, for the per-uid limits.
 *
 * Registrations count while live, whether or not their owner's connection
 * is still open (durable registrations outlive it and keep their fds);
 * bytes count the host and cuda-vmm buffers the daemon keeps alive, until
 * freed; leases count by the holder's uid; connections while open.  fds
 * count what the daemon holds open for a uid's registrations until they are
 * freed (2 per host registration: the memfd and its read-only reopen; 1 per
 * cuda-vmm one, its allocation's fd, an upper bound when registrations
 * share it), and so do fd store entries while the store is in use (1 per
 * host or cuda-vmm registration).  An entry exists while any count is
 * nonzero. */
#ifndef GPUIPCD_QUOTA_H
#define GPUIPCD_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

struct daemon;
struct reg;

struct uid_use {
        uint64_t regs, leases, bytes;
        uint64_t conns;
        uint64_t fds, stored;
};

/* What a registration of kind costs in fds, and in fd store entries, with
 * nfds the fds its request carries (a cuda-vmm one over several chunks
 * holds one per chunk). */
unsigned quota_fds_of_kind(unsigned kind, unsigned nfds);
unsigned quota_store_of_kind(unsigned kind, unsigned nfds);

/* The counts of uid (zeros when it holds nothing). */
struct uid_use quota_of(const struct daemon *d, uint32_t uid);

/* Counting; each returns nothing: an entry that cannot be allocated is
 * not counted (-ENOMEM is rare and only loosens a limit). */
void quota_conn(struct daemon *d, uint32_t uid, int delta);
void quota_lease(struct daemon *d, uint32_t uid, int delta);
void quota_reg(struct daemon *d, uint32_t uid, int delta);
/* Charges r's bytes to its owner's uid (host, cuda-vmm) once. */
void quota_charge(struct daemon *d, struct reg *r);
/* Gives r's charged bytes back. */
void quota_uncharge(struct daemon *d, struct reg *r);
/* Charges r's fds (and, with store true, its fd store entry) to its
 * owner's uid and to the daemon's total, once; quota_fds_uncharge gives
 * them back. */
void quota_fds_charge(struct daemon *d, struct reg *r, bool store);
void quota_fds_uncharge(struct daemon *d, struct reg *r);
void quota_done(struct daemon *d);

#endif
