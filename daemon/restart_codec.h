/* restart_codec.h: the journal's records, written and read (restart_codec.c).
 *
 * Each record is one msgpack map whose "t" names its type (docs/restart.md):
 *   H  the header: version, serial and the id counters (first, once)
 *   S  a session: token, pid, uid, gid, start_time;  E  its end
 *   M  a released event a detached session missed
 *   A  a registration, with its meta, access rule and CUDA allocation (a
 *      batch: its parts, each with its own, and its arrow description);
 *      U  its unregistering;  C  its allocation replaced (adopt)
 *   L  a lease;  R  its release
 * restart_persist.c writes them with the jrec_pack_* calls and
 * restart_replay.c reads them with the jrec_decode_* and jrec_get_* ones,
 * so each key is spelled here alone.  Decoders return 0, -EINVAL for a
 * missing or malformed field, or what their comment says. */
#ifndef GPUIPCD_RESTART_CODEC_H
#define GPUIPCD_RESTART_CODEC_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_alloc.h"
#include "proto.h"
#include "registry.h"

#define JREC_VERSION  1u                        /* of the record format */
/* Ids at or above this are refused: a corrupt journal must not wrap the
 * counters (ids are never reused, so a wrap would hand out taken ones). */
#define JREC_ID_LIMIT (UINT64_C(1) << 62)

/* ---- writing ------------------------------------------------------------ */

void jrec_pack_header(msgpack_packer *pk, uint64_t serial, uint64_t next_id,
                      uint64_t next_lease, uint64_t next_alloc);
void jrec_pack_session(msgpack_packer *pk, const struct reg_party *p);
void jrec_pack_session_end(msgpack_packer *pk, const struct reg_party *p);
void jrec_pack_missed(msgpack_packer *pk, const struct reg_party *p, uint64_t id,
                      const char *name, size_t len);
/* exe: the owner executable recorded for r (ledger_reg_exe). */
void jrec_pack_reg(msgpack_packer *pk, const struct reg *r, const char *exe);
void jrec_pack_cuda_changed(msgpack_packer *pk, const struct reg *r);
void jrec_pack_lease(msgpack_packer *pk, const struct lease *l);
/* U (an unregistered registration's id) or R (a released lease's). */
void jrec_pack_id(msgpack_packer *pk, char type, uint64_t id);

/* ---- reading ------------------------------------------------------------ */

/* The record's type letter. */
int jrec_type(const msgpack_object *m, char *ret);

struct jrec_header {
        uint64_t next_id, next_lease, next_alloc;
};
/* -EPROTONOSUPPORT for another version's journal. */
int jrec_decode_header(const msgpack_object *m, struct jrec_header *ret);
/* The serial of header m, 0 when it has none. */
uint64_t jrec_header_serial(const msgpack_object *m);

struct jrec_session {
        uint8_t token[PROTO_SESSION_LEN];
        uint32_t pid, uid, gid;
        uint64_t start_time;
};
int jrec_decode_session(const msgpack_object *m, struct jrec_session *ret);
/* The session token of an E, M, L or A record. */
int jrec_get_token(const msgpack_object *m, uint8_t token[PROTO_SESSION_LEN]);

struct jrec_missed {
        uint8_t token[PROTO_SESSION_LEN];
        uint64_t id;
        const char *name;               /* into m */
        size_t name_len;
};
int jrec_decode_missed(const msgpack_object *m, struct jrec_missed *ret);

struct jrec_lease {
        uint8_t token[PROTO_SESSION_LEN];
        uint64_t id, reg;
};
int jrec_decode_lease(const msgpack_object *m, struct jrec_lease *ret);

/* The id of a U or R record: proto_get_u64()'s result. */
int jrec_get_id(const msgpack_object *m, uint64_t *ret);

/* An A record, field by field in the order replay needs them: first the
 * scalars into p (id, name, kind, size, offset, created_ms, ephemeral,
 * revocable, pid, uid, gid; strings point into m). */
int jrec_decode_reg(const msgpack_object *m, struct reg_params *p);
/* Its owner executable, "" when absent. */
void jrec_get_exe(const msgpack_object *m, const char **ret, size_t *ret_len);
/* Its expiry, left as it is when absent. */
int jrec_get_expires(const msgpack_object *m, uint64_t *ret);
/* Its meta (NULL, 0 when absent), checked as register checks it; -ENOMEM. */
int jrec_get_meta(const msgpack_object *m, const uint8_t **ret, size_t *ret_len);
/* Its access rule, a new block (NULL when absent); -ENOMEM. */
int jrec_get_access(const msgpack_object *m, struct proto_access **ret);
/* Its cuda map, NULL when absent. */
const msgpack_object *jrec_get_cuda(const msgpack_object *m);

/* The batch map of an A record of kind batch: its memfd count, packed
 * arrow description (into m), event (NULL when absent) and parts array. */
struct jrec_batch {
        uint32_t n_memfds;
        const uint8_t *arrow;
        size_t arrow_len;
        const uint8_t *event;           /* PROTO_IPC_HANDLE_LEN bytes */
        const msgpack_object *parts;    /* 1 to PROTO_BATCH_PARTS_MAX maps */
};
int jrec_decode_batch(const msgpack_object *m, struct jrec_batch *ret);
/* One of its parts: kind, size and offset; for host its memfd (below
 * n_memfds) and shared_write, else its cuda map. */
struct jrec_part {
        unsigned kind;
        uint64_t size, offset;
        uint32_t memfd;
        bool shared_write;
        const msgpack_object *cuda;
};
int jrec_decode_part(const msgpack_object *m, uint32_t n_memfds, struct jrec_part *ret);

/* A C record's scalars and its cuda map. */
struct jrec_cuda_changed {
        uint64_t id, kind, offset;
        bool ephemeral, revocable;
        const msgpack_object *cuda;
};
int jrec_decode_cuda_changed(const msgpack_object *m, struct jrec_cuda_changed *ret);

/* The fields of a cuda map (of an A or C record). */
int jrec_get_device(const msgpack_object *cuda, uint8_t device[PROTO_UUID_LEN]);
/* The pool entry of a cuda-pool pointer, NULL when absent. */
const msgpack_object *jrec_get_pool(const msgpack_object *cuda);
bool jrec_get_event(const msgpack_object *cuda, uint8_t event[PROTO_IPC_HANDLE_LEN]);
bool jrec_get_cacheable(const msgpack_object *cuda);
/* The chunks after the first: proto_get_array()'s result. */
int jrec_get_chunks(const msgpack_object *cuda, const msgpack_object **ret);
/* Why the library copied it: proto_get_str()'s result. */
int jrec_get_copied(const msgpack_object *cuda, const char **ret, size_t *ret_len);

/* One allocation entry (in a cuda map, a chunk or a pool): its id (checked
 * against 0 and JREC_ID_LIMIT), kind, size, buffer_id, creator uid, handle
 * and key. */
struct jrec_alloc {
        uint64_t id, kind, size, buffer_id;
        uint32_t uid;
        uint8_t handle[PROTO_IPC_HANDLE_LEN];
        uint8_t key[PROTO_ALLOC_KEY_LEN];
};
int jrec_decode_alloc(const msgpack_object *m, struct jrec_alloc *ret);

#endif
