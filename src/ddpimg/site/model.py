"""A site profile: how to recognise a cluster and what it needs. Loaded from TOML."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MatchRule:
    """How auto-selection recognises the site. Any one matching rule selects it."""

    hostnames: tuple[str, ...] = ()  # fnmatch patterns on the short hostname
    slurm_cluster_names: tuple[str, ...] = ()  # values of SLURM_CLUSTER_NAME
    env: tuple[tuple[str, str], ...] = ()  # marker variables: (name, fnmatch pattern of value)


@dataclass(frozen=True)
class JobDefaults:
    """What the batch-script generator assumes about a node of this site."""

    gpus_per_node: int = 0
    gpu_type: str = ""
    gpu_request: str = "gres"  # "gres" -> --gres=gpu[:type]:N ; "gpus-per-node" -> --gpus-per-node
    cpus_per_task: int = 1
    partition: str = ""
    gpu_vendor: str = "nvidia"  # "nvidia" -> apptainer --nv ; "amd" -> --rocm
    constraint: str = ""  # --constraint, for sites that pick GPU nodes by feature (Perlmutter: gpu)
    binds: tuple[str, ...] = ()
    addons: tuple[str, ...] = ()  # add-on files every job of the site mounts (ddpimg addon)
    gpu_types: tuple[str, ...] = ()  # the site's Slurm GPU type names, exactly (case and all)
    max_gpus_per_node: int = 0  # the largest GPU node; 0: gpus_per_node
    max_gpus_constraint: str = ""  # the --constraint that selects those largest nodes
    qos: str = ""  # --qos
    mem_per_gpu: str = ""  # Slurm memory size per GPU; --mem is this times the GPUs per node
    cpu_bind: str = ""  # srun --cpu-bind, e.g. LUMI's mask of each GCD's cores
    local_dir: str = ""  # node-local directory --stage-data copies into; $NAME forms allowed
    local_dir_kind: str = ""  # "disk", "ram" (a copy there counts against memory), "" unknown
    max_nodes: int = 0  # the most nodes a job can span (local: 1, loopback); 0: no limit
    unset_env: tuple[str, ...] = ()  # variables the batch script unsets before srun
    modules: tuple[str, ...] = ()  # modules the batch shell loads (its runtime's bindings)
    module_use: tuple[str, ...] = ()  # module directories to `module use` first


@dataclass(frozen=True)
class Container:
    """How the site runs containers (:mod:`ddpimg.site.container`)."""

    runtime: str = ""  # a name in RUNTIMES; "" leaves ddpimg sbatch's default
    image: str = ""  # the image reference; "" -> the flavour's name in the runtime's form
    options: tuple[str, ...] = ()  # extra options of the runtime's own command
    annotations: tuple[tuple[str, str], ...] = ()  # sorted; the edf runtime's [annotations]
    image_from: str = ""  # "site": the image is the site's own, jobs need --ddpimg-from


@dataclass(frozen=True)
class Limits:
    """What a partition or QOS allows one job; 0 or "": not stated."""

    max_time: str = ""  # Slurm time
    min_nodes: int = 0
    max_nodes: int = 0
    max_gpus: int = 0  # GPUs of the whole job
    min_gpus_per_node: int = 0
    max_mem: str = ""  # memory per node (Slurm size)
    note: str = ""  # what a job there must know (access it needs), written into the script


@dataclass(frozen=True)
class Fabric:
    """The host network stack the container needs (:mod:`ddpimg.site.fabric`)."""

    transport: str = ""  # "ib", "ofi", "socket", or "" (not checked)
    binds: tuple[str, ...] = ()  # "HOST" or "HOST:TARGET", bound into the container
    env: tuple[tuple[str, str], ...] = ()  # sorted (name, value)
    library_paths: tuple[str, ...] = ()  # LD_LIBRARY_PATH entries inside the container
    min_busbw_gbps: float = 0.0  # ddpimg doctor's floor for a multi-node all-reduce


@dataclass(frozen=True)
class Hardware:
    """The site's GPUs and the torch build flavour (ddpimg.hardware.builds) they need."""

    gpus: str = ""  # e.g. "V100"
    arch: str = ""  # e.g. "sm_70", "gfx90a"
    build: str = ""  # a key of ddpimg.hardware.builds.BUILDS, or "" (CPU / unknown)


@dataclass(frozen=True)
class SiteProfile:
    """One site's profile. ``master_addr`` is a template over ``{node}`` (the first node of the
    job, as Slurm names it) or ``interface:NAME`` (the IPv4 address of that interface on rank 0,
    learnt at run time)."""

    name: str
    description: str
    path: str  # file it was loaded from
    content_hash: str  # sha256 of the file bytes
    status: str = "active"  # "active" or "retired" (kept for its users' archives)
    status_note: str = ""  # what a retired site's users are told when it is selected
    successor: str = ""  # the profile of the site that replaced a retired one
    match: MatchRule = field(default_factory=MatchRule)
    interfaces: tuple[str, ...] = ()
    master_addr: str = "{node}"
    port_range: tuple[int, int] = (20000, 29999)
    backend: str = ""  # "" -> nccl with CUDA, gloo without
    exports: tuple[tuple[str, str], ...] = ()  # sorted (name, value)
    remove: tuple[str, ...] = ()  # extra host variables (fnmatch patterns) to remove
    keep: tuple[str, ...] = ()  # host variables (fnmatch patterns) never removed
    job: JobDefaults = field(default_factory=JobDefaults)
    fabric: Fabric = field(default_factory=Fabric)
    hardware: Hardware = field(default_factory=Hardware)
    container: Container = field(default_factory=Container)
    partitions: tuple[tuple[str, Limits], ...] = ()  # sorted (partition, its limits)
    qos: tuple[tuple[str, Limits], ...] = ()  # sorted (QOS, its limits)
    sources: tuple[tuple[str, str], ...] = ()  # sorted (dotted key, URL or "unverified: ...")
    facts: tuple[str, ...] = ()  # the dotted keys the file sets (ddpimg.site.sources.fact_keys)

    @property
    def retired_notice(self) -> str:
        """What to tell the user of a retired site ("" for an active one)."""
        if self.status != "retired":
            return ""
        return f"site {self.name} is retired" + (
            f": {self.status_note}" if self.status_note else ""
        )
