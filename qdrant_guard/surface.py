"""Which qdrant-client methods the guard decides, and why the others are safe.

``tests/test_surface.py`` lists every public method of qdrant-client's ``QdrantClient`` and
``AsyncQdrantClient`` and fails on any that is in neither table, so an upgrade of qdrant-client
cannot open a hole silently.
"""
from __future__ import annotations

# Methods that write vectors: every vector passes the receipt / noise / boundary rules.
WRITE_VECTORS = frozenset({"upsert", "upload_points", "upload_collection", "batch_update_points", "update_vectors"})

# Methods that change payloads: receipts cannot be forged, altered or stripped through them.
PAYLOAD = frozenset({"set_payload", "overwrite_payload", "delete_payload", "clear_payload"})

# Methods that return points (payloads, vectors): boundary, query checks, diversity, budget, stripping.
READ_POINTS = frozenset({"query_points", "query_batch_points", "query_points_groups", "scroll", "retrieve"})

# One collection, no vectors returned: the caller must be allowed to read it (their filters, and
# facet's key, also obey the extraction budget, see ReadOps.budget_oracle). get_optimizations
# (server only) is optimizer progress made of point counts: each segment's, and the queue's.
READ_COLLECTION = frozenset({"count", "facet", "search_matrix_pairs", "search_matrix_offsets", "get_optimizations"})

# One collection, changed without new vectors: the caller must be allowed to write it.
WRITE_COLLECTION = frozenset({"delete", "delete_vectors", "create_payload_index", "delete_payload_index"})

# Collection administration, snapshots (which export raw vectors) and sharding: owner boundary only
# (without an owner, the writers). Shard point counts and snapshot sizes are withheld from an
# administrator who may not read the collection (withheld.ADMIN_COUNTED).
ADMIN = frozenset(
    {
        "create_collection",
        "recreate_collection",
        "delete_collection",
        "update_collection",
        "create_vector_name",
        "delete_vector_name",
        "create_snapshot",
        "delete_snapshot",
        "list_snapshots",
        "create_shard_snapshot",
        "delete_shard_snapshot",
        "list_shard_snapshots",
        "create_shard_key",
        "delete_shard_key",
        "list_shard_keys",
        "collection_cluster_info",
        "cluster_collection_update",
    }
)

# Collection and alias names: answered in full under names_visible = "all" (the default, as
# qdrant-client answers them); under "accessible" only the names the principal may read, write or
# own, a hidden one answered as a missing one (dispatch.Dispatch.name_visible).
NAMES = frozenset({"get_collections", "collection_exists", "get_aliases", "get_collection_aliases"})

# Collection configuration for any principal who may see its name (names_visible); its counts, payload index schema and metadata
# (owner-written data, qdrant-client 1.20) only for principals who may read it, and the index
# schema's per-field counts not outside the owner boundary of a budgeted collection
# (withheld.describe_collection).
DESCRIBE = frozenset({"get_collection"})

# Refused under a guard policy; the operator's job, with a client constructed without guard=.
# Snapshot recovery: the target name says nothing about what the snapshot holds (a copy of a
# sensitive collection can be restored under a PUBLIC name). Peer removal and recovery and
# deleting full snapshots: no data leaks, but an agent could take replicas or the backups of every
# collection away, whichever boundaries own them.
SNAPSHOT_RECOVERY = frozenset({"recover_snapshot", "recover_shard_snapshot"})
OPERATOR_ONLY = SNAPSHOT_RECOVERY | {"remove_peer", "recover_current_peer", "delete_full_snapshot"}

# Guarded with dedicated logic spanning several collections. cluster_telemetry (server only) gives
# each collection's per-shard point, vector and size counts: shown for readable collections only.
# list_full_snapshots gives each full snapshot's size, all collections' storage: shown only to a
# principal who may read every collection.
MULTI = frozenset({"update_collection_aliases", "migrate", "create_full_snapshot", "cluster_telemetry",
                   "list_full_snapshots"})

GUARDED = (WRITE_VECTORS | PAYLOAD | READ_POINTS | READ_COLLECTION | WRITE_COLLECTION | ADMIN | DESCRIBE
           | NAMES | OPERATOR_ONLY | MULTI)

# Methods that are safe to pass through, each with the reason.
SAFE: dict[str, str] = {
    "close": "closes the connection; touches no data",
    "info": "server version information only",
    "cluster_status": "cluster topology; no data",
    "list_text_models": "fastembed model catalogue",
    "list_sparse_models": "fastembed model catalogue",
    "list_image_models": "fastembed model catalogue",
    "list_late_interaction_text_models": "fastembed model catalogue",
    "list_late_interaction_multimodal_models": "fastembed model catalogue",
    "get_embedding_size": "model metadata",
    "init_options": "constructor options with the credentials: the facade refuses it under a guard policy "
                    "(QdrantClient(**client.init_options) would be a client without the guard)",
    "DEFAULT_BATCH_SIZE": "constant",
    "http": "raw REST handle: the facade refuses it under a guard policy (it would bypass the guard)",
    "grpc_points": "raw gRPC handle: the facade refuses it under a guard policy (it would bypass the guard)",
    "grpc_collections": "raw gRPC handle: the facade refuses it under a guard policy (it would bypass the guard)",
}
