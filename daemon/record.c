/* record.c: the registration record, as list, stat, lookup and register
 * replies carry it (docs/protocol.md, "Records"). */
#include "batch.h"
#include "cuda_reg.h"
#include "ledger.h"
#include "record.h"

/* One holders entry per lease, newest first, at most max. */
static void pack_holders(msgpack_packer *pk, const struct reg *r, uint32_t max)
{
        uint32_t n = 0, i = 0;

        for (const struct lease *l = r->held; l && n < max; l = l->rnext)
                n++;
        msgpack_pack_array(pk, n);
        for (const struct lease *l = r->held; l && i < n; l = l->rnext, i++) {
                msgpack_pack_map(pk, 5);
                proto_pack_ku64(pk, "lease", l->id);
                proto_pack_ku64(pk, "pid", l->holder->pid);
                proto_pack_ku64(pk, "uid", l->holder->uid);
                proto_pack_kstr(pk, "exe", ledger_party_exe(l->holder));
                proto_pack_ku64(pk, "since_ms", l->since_ms);
        }
}

void pack_record_as(msgpack_packer *pk, const struct reg *r, enum record_use use,
                    uint32_t holders_max, const struct record_lookup *lk)
{
        struct proto_map m;

        proto_map_begin(&m, pk);
        proto_map_ku64(&m, "id", r->id);
        proto_map_kstrn(&m, "name", r->name, r->name_len);
        proto_map_kstr(&m, "kind", proto_kind_name(r->kind));
        proto_map_ku64(&m, "size", r->size);
        proto_map_ku64(&m, "offset", r->offset);
        if (r->meta) {
                /* Validated and packed once, at register time. */
                proto_map_key(&m, "meta");
                pk->callback(pk->data, (const char *)r->meta, r->meta_len);
        }
        proto_map_key(&m, "owner");
        msgpack_pack_map(pk, 5);
        proto_pack_ku64(pk, "pid", r->pid);
        proto_pack_ku64(pk, "uid", r->uid);
        proto_pack_ku64(pk, "gid", r->gid);
        proto_pack_kbool(pk, "connected", r->owner != NULL);
        proto_pack_kstr(pk, "exe", ledger_reg_exe(r->id));
        proto_map_ku64(&m, "created_ms", r->created_ms);
        proto_map_ku64(&m, "leases", r->leases);
        proto_map_kbool(&m, "ephemeral", r->ephemeral);
        proto_map_kstr(&m, "state", r->live ? "live" : "unregistered");
        if (r->expires_ms)
                proto_map_ku64(&m, "expires_ms", r->expires_ms);
        if (holders_max > 0) {
                proto_map_key(&m, "holders");
                pack_holders(pk, r, holders_max);
        }
        proto_map_key(&m, "access");
        proto_access_pack(pk, r->access);
        reg_cuda_pack_record(&m, r, use == RECORD_LOOKUP);
        if (r->batch)
                batch_pack_record(&m, r->batch, use, lk);
        proto_map_end(&m);
}
