"""Names of the NCCL and Gloo environment variables a site profile may export.

A misspelt NCCL variable is silently ignored by NCCL, so a profile that sets
``NCCL_SOCKET_IFNAM`` would look right and do nothing. The loader therefore checks every
exported ``NCCL_*`` / ``GLOO_*`` name against this list and warns (not fails: NCCL gains
variables faster than this list) with the closest known name.

Source: the NCCL User Guide, "Environment Variables"
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, and the same page of
earlier releases, so that names documented for older NCCL versions still pass), plus the
logging variables of its "Troubleshooting / Logging" page. Every name outside the legacy
group was also checked against the parameter names in the libnccl that torch 2.14 ships.
Gloo reads
``GLOO_SOCKET_IFNAME`` and ``GLOO_DEVICE_TRANSPORT`` (PyTorch's Gloo process group).

Both ``[env]`` and ``[fabric.env]`` are checked. ``FI_*`` (libfabric) and ``CXI_*`` names
are deliberately not: libfabric's variables depend on the provider and its version
(``fi_info -e`` lists those of the installed one), so a fixed list would warn about valid
names. The shipped profiles use ``NCCL_NET``, ``NCCL_NET_GDR_LEVEL`` and ``NCCL_CROSS_NIC``
from this list, plus ``FI_CXI_*``, ``FI_MR_CACHE_MONITOR`` and ``CXI_FORK_SAFE*``.
"""

from __future__ import annotations

CHECKED_PREFIXES = ("NCCL_", "GLOO_")

NCCL_VARIABLES = frozenset(
    {
        # System configuration
        "NCCL_SOCKET_IFNAME",
        "NCCL_SOCKET_FAMILY",
        "NCCL_SOCKET_RETRY_CNT",
        "NCCL_SOCKET_RETRY_SLEEP_MSEC",
        "NCCL_SOCKET_POLL_TIMEOUT_MSEC",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_CROSS_NIC",
        "NCCL_IB_HCA",
        "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_ADDR_FAMILY",
        "NCCL_IB_ADDR_RANGE",
        "NCCL_IB_ROCE_VERSION_NUM",
        "NCCL_IB_SL",
        "NCCL_IB_TC",
        "NCCL_IB_FIFO_TC",
        "NCCL_IB_RETURN_ASYNC_EVENTS",
        "NCCL_IB_DATA_DIRECT",
        "NCCL_OOB_NET_ENABLE",
        "NCCL_OOB_NET_IFNAME",
        "NCCL_UID_STAGGER_THRESHOLD",
        "NCCL_UID_STAGGER_RATE",
        "NCCL_NET",
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_ENV_PLUGIN",
        "NCCL_IGNORE_CPU_AFFINITY",
        "NCCL_CONF_FILE",
        "NCCL_HOSTID",
        "NCCL_COMM_ID",
        "NCCL_DEBUG",
        "NCCL_DEBUG_FILE",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_DEBUG_TIMESTAMP_FORMAT",
        "NCCL_DEBUG_TIMESTAMP_LEVELS",
        "NCCL_COLLNET_ENABLE",
        "NCCL_COLLNET_NODE_THRESHOLD",
        "NCCL_CTA_POLICY",
        "NCCL_NETDEVS_POLICY",
        "NCCL_TOPO_FILE",
        "NCCL_TOPO_DUMP_FILE",
        "NCCL_TOPO_DUMP_FILE_RANK",
        "NCCL_SET_THREAD_NAME",
        "NCCL_RAS_ENABLE",
        "NCCL_RAS_ADDR",
        "NCCL_RAS_TIMEOUT_FACTOR",
        # Debugging
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_P2P_DIRECT_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_NCHANNELS",
        "NCCL_CHECK_POINTERS",
        "NCCL_LAUNCH_MODE",
        "NCCL_IB_DISABLE",
        "NCCL_IB_AR_THRESHOLD",
        "NCCL_IB_QPS_PER_CONNECTION",
        "NCCL_IB_SPLIT_DATA_ON_QPS",
        "NCCL_IB_PCI_RELAXED_ORDERING",
        "NCCL_IB_ADAPTIVE_ROUTING",
        "NCCL_IB_ECE_ENABLE",
        "NCCL_IB_MERGE_NICS",
        "NCCL_IB_MQP_RETRY_ALL",
        "NCCL_IB_MQP_RETRY_CNT",
        "NCCL_IB_MQP_RETRY_SLEEP_MSEC",
        "NCCL_MEM_SYNC_DOMAIN",
        "NCCL_CUMEM_ENABLE",
        "NCCL_CUMEM_HOST_ENABLE",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_NET_GDR_C2C",
        "NCCL_NET_GDR_READ",
        "NCCL_NET_SHARED_BUFFERS",
        "NCCL_NET_SHARED_COMMS",
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_NVB_DISABLE",
        "NCCL_PXN_DISABLE",
        "NCCL_P2P_PXN_LEVEL",
        "NCCL_PXN_C2C",
        "NCCL_RUNTIME_CONNECT",
        "NCCL_GRAPH_REGISTER",
        "NCCL_LOCAL_REGISTER",
        "NCCL_LEGACY_CUDA_REGISTER",
        "NCCL_SET_STACK_SIZE",
        "NCCL_GRAPH_MIXING_SUPPORT",
        "NCCL_DMABUF_ENABLE",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_P2P_NVL_CHUNKSIZE",
        "NCCL_P2P_PCI_CHUNKSIZE",
        "NCCL_P2P_LL_THRESHOLD",
        "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
        "NCCL_COMM_BLOCKING",
        "NCCL_CGA_CLUSTER_SIZE",
        "NCCL_MAX_CTAS",
        "NCCL_MIN_CTAS",
        "NCCL_NCHANNELS_PER_NET_PEER",
        "NCCL_NVLS_ENABLE",
        "NCCL_NVLS_CHUNKSIZE",
        "NCCL_MNNVL_ENABLE",
        "NCCL_MNNVL_UUID",
        "NCCL_MNNVL_CLIQUE_ID",
        "NCCL_LAUNCH_ORDER_IMPLICIT",
        "NCCL_LAUNCH_RACE_FATAL",
        "NCCL_WORK_FIFO_BYTES",
        "NCCL_WIN_ENABLE",
        "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE",
        # Documented for earlier releases. Newer NCCL ignores some of them, but a profile for
        # a site with an older NCCL may still set them on purpose.
        "NCCL_IB_GDR_LEVEL",
        "NCCL_RINGS",
        "NCCL_MAX_NRINGS",
        "NCCL_MIN_NRINGS",
        "NCCL_CHECKS_DISABLE",
        "NCCL_IB_CUDA_SUPPORT",
        "NCCL_LL_THRESHOLD",
        "NCCL_SINGLE_RING_THRESHOLD",
        "NCCL_TREE_THRESHOLD",
    }
)

GLOO_VARIABLES = frozenset({"GLOO_SOCKET_IFNAME", "GLOO_DEVICE_TRANSPORT"})

KNOWN_VARIABLES = NCCL_VARIABLES | GLOO_VARIABLES


def is_unknown(name: str) -> bool:
    """True for an ``NCCL_*`` / ``GLOO_*`` name that is not a known variable."""
    return name.startswith(CHECKED_PREFIXES) and name not in KNOWN_VARIABLES


def closest_known(name: str) -> str | None:
    """The known variable most like ``name``, or None when none is close."""
    import difflib  # only for a profile that exports an unknown name

    matches = difflib.get_close_matches(name, sorted(KNOWN_VARIABLES), n=1, cutoff=0.6)
    return matches[0] if matches else None
