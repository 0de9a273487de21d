/* wire.h: the constants of the gpuipcd wire format, each defined once.
 *
 * docs/protocol.md names these limits; the daemon, its journal and
 * libgpuipc take them from here.  client/gpuipc.h repeats the few that the
 * public API shows (GPUIPC_PROTOCOL_VERSION, GPUIPC_DEFAULT_SOCKET,
 * GPUIPC_ACCESS_IDS_MAX); client/lib/internal.h asserts that they agree.
 * No includes: the registry and the allocation table use these without
 * the msgpack codec.
 */
#ifndef GPUIPC_WIRE_H
#define GPUIPC_WIRE_H

#define PROTO_VERSION         1u
#define PROTO_HDR_LEN         4u           /* big-endian u32 length prefix */
#define PROTO_MAX_FRAME       65536u       /* default cap on a frame body */
#define PROTO_MAX_FRAME_LIMIT (16u << 20)  /* cap that no setting may exceed */
#define PROTO_MAX_DEPTH       8u           /* nesting of maps and arrays */
#define PROTO_MAX_FDS         64u          /* fds declared by one frame */
#define PROTO_MAX_PENDING_FDS 72u          /* fds received, not yet claimed */
#define PROTO_CHUNKS_MAX      PROTO_MAX_FDS /* VMM chunks of one cuda-vmm registration */
#define PROTO_UNHOLD_MAX      1024u        /* allocation ids in one unhold */
#define PROTO_NAME_MAX        255u         /* bytes in a registration name */
#define PROTO_NAME_MAX_SEGMENTS 16u
#define PROTO_DTYPE_MAX       32u
#define PROTO_NDIM_MAX        32u
#define PROTO_USER_MAX_ENTRIES 32u
#define PROTO_USER_KEY_MAX    64u
#define PROTO_USER_VALUE_MAX  1024u
#define PROTO_WAIT_MAX_MS     3600000u     /* longest lookup wait: one hour */
#define PROTO_DEFAULT_SOCKET  "/run/gpuipcd/gpuipcd.sock"
#define PROTO_SESSION_LEN     16u          /* a resume token (hello's session) */
#define PROTO_IPC_HANDLE_LEN  64u          /* a CUipcMemHandle or CUipcEventHandle */
#define PROTO_UUID_LEN        16u          /* a device's UUID, as bytes */
#define PROTO_ALLOC_KEY_LEN   16u          /* a cuda-vmm allocation's or pool's key */
#define PROTO_ACCESS_IDS_MAX  32u          /* uids, and gids, one access rule may list */
#define PROTO_ACCESS_GROUP_MAX 32u         /* bytes of an access rule's group name */
/* Batches (docs/protocol.md, "Batches"). */
#define PROTO_BATCH_PARTS_MAX 256u          /* parts of one batch */
#define PROTO_BATCH_NODES_MAX 1024u         /* column nodes of its arrow description */
#define PROTO_BATCH_BUFFERS_MAX 3u          /* buffers of one column node */
#define PROTO_BATCH_FORMAT_MAX 64u          /* bytes of an Arrow format string */
#define PROTO_BATCH_COLNAME_MAX 255u        /* bytes of a column node's name */
#define PROTO_BATCH_ARROW_DEPTH 5u          /* nesting of the arrow map, itself 1 */

#endif
