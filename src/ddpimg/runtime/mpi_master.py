"""Learning the master address under ``mpirun``, which gives no host list.

Rank 0 decides its own address (the profile's rule applied to its short host name, or the
IPv4 address of the profile's interface) and broadcasts it with mpi4py. This replaces
DeepSpeed's own MPI discovery, which takes the first address of ``hostname -I`` — on many
clusters a blocked Ethernet port.
"""

from __future__ import annotations

from ddpimg.errors import LauncherError
from ddpimg.runtime.interfaces import interface_names, ipv4_address
from ddpimg.site.master import apply_master_rule, master_interface
from ddpimg.site.model import SiteProfile


def own_master_address(profile: SiteProfile, short_hostname: str) -> str:
    """The address other ranks should use to reach this host, by the profile's rule."""
    name = master_interface(profile)
    if name:
        addr = ipv4_address(name)
        if addr is None:
            raise LauncherError(
                f"site profile {profile.name} ({profile.path}): "
                f"network.master_addr={profile.master_addr!r} "
                f"but interface {name!r} has no IPv4 address on {short_hostname} "
                f"(interfaces here: {', '.join(interface_names())})",
                hint="fix network.master_addr in the profile, or pick another with --site",
            )
        return addr
    return apply_master_rule(profile, short_hostname)


def broadcast_master_address(profile: SiteProfile, short_hostname: str) -> str:
    """Collective over MPI_COMM_WORLD: every rank returns rank 0's address."""
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise LauncherError(
            "this MPI job has no host list, so rank 0 must publish its address with mpi4py, "
            f"which cannot be imported ({err})",
            hint="install mpi4py built against this MPI, or export MASTER_ADDR to all ranks "
            "(mpirun -x MASTER_ADDR=<rank 0 host>)",
        ) from err
    comm = MPI.COMM_WORLD
    # Rank 0 may fail to find its interface; broadcast the failure too so no rank hangs.
    payload: tuple[str, str] | None = None
    if comm.Get_rank() == 0:
        try:
            payload = ("ok", own_master_address(profile, short_hostname))
        except LauncherError as err:
            payload = ("error", str(err))
    status, value = comm.bcast(payload, root=0)
    if status != "ok":
        raise LauncherError(f"rank 0 could not determine its address: {value}")
    return str(value)
