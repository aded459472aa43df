"""The master-address rule of a site: how the rendezvous host is named from the first node.

A profile's ``network.master_addr`` is either a template over ``{node}`` or
``interface:NAME``:

- ``"{node}"``: the node name itself. On CSC Puhti/Mahti the short hostname resolves to the
  InfiniBand address, while ``hostname -I`` (what DeepSpeed's MPI discovery uses) lists a
  blocked Ethernet address first.
- ``"{node}i"``: JSC machines (JUWELS Booster, HDF-ML) name the InfiniBand side of node ``X``
  as ``Xi``; the plain name resolves to a network the compute nodes cannot reach each other on.
- ``"{node}.palmetto.clemson.edu"``: Clemson Palmetto's nodes are reached by their FQDN.
- ``"interface:NAME"``: the IPv4 address of interface NAME on rank 0, which only rank 0 can
  learn at run time; the pure layers report an empty address for it.

Templates get the *short* node name (domain stripped) so that a FQDN template also works when
a launcher lists FQDNs. Node names that are IP literals are returned unchanged: no template
can sensibly decorate an address.
"""

from __future__ import annotations

import ipaddress
import string

from ddpimg.site.model import SiteProfile

INTERFACE_PREFIX = "interface:"
NODE_FIELD = "node"
# Linux interface names are at most IFNAMSIZ - 1 = 15 bytes.
_MAX_INTERFACE_NAME = 15


def check_master_template(template: str) -> str | None:
    """Why ``template`` is not a valid ``master_addr`` rule, or None when it is."""
    if template.startswith(INTERFACE_PREFIX):
        name = template[len(INTERFACE_PREFIX) :]
        if not name:
            return "'interface:' needs an interface name, e.g. 'interface:ib0'"
        if len(name) > _MAX_INTERFACE_NAME or any(c.isspace() or c in ",/:" for c in name):
            return f"'{name}' is not a network interface name"
        return None
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as err:
        return f"it is not a valid template ({err}); write literal braces as '{{{{' and '}}}}'"
    placeholders = [(name, spec, conv) for _, name, spec, conv in fields if name is not None]
    for name, spec, conv in placeholders:
        if name != NODE_FIELD:
            return f"unknown placeholder '{{{name}}}'; the only placeholder is '{{node}}'"
        if spec or conv:
            return "'{node}' takes no format spec or conversion"
    if not placeholders:
        return "it must contain '{node}' or start with 'interface:'"
    return None


def master_interface(profile: SiteProfile) -> str:
    """The interface whose address rank 0 publishes, or "" when the rule is a template."""
    if profile.master_addr.startswith(INTERFACE_PREFIX):
        return profile.master_addr[len(INTERFACE_PREFIX) :]
    return ""


def apply_master_rule(profile: SiteProfile, master_node: str) -> str:
    """The rendezvous host for a job whose rank 0 runs on ``master_node``.

    Returns "" when the node is unknown ("") or the rule is ``interface:NAME`` (resolved at
    run time by rank 0).
    """
    if not master_node or master_interface(profile):
        return ""
    try:
        ipaddress.ip_address(master_node)
    except ValueError:
        short = master_node.split(".", 1)[0]
        return profile.master_addr.format(node=short)
    return master_node
