"""Site profiles: recognise the cluster, then say how its network, master address, environment
and batch jobs must look. Pure: no torch, no os.environ; see ``site-profiles/README.md``."""

from __future__ import annotations

from ddpimg.site.load import ProfileWarning, load_profile
from ddpimg.site.master import apply_master_rule, master_interface
from ddpimg.site.model import JobDefaults, MatchRule, SiteProfile
from ddpimg.site.select import Selection, known_profiles, profile_dirs, select_profile

__all__ = [
    "JobDefaults",
    "MatchRule",
    "ProfileWarning",
    "Selection",
    "SiteProfile",
    "apply_master_rule",
    "known_profiles",
    "load_profile",
    "master_interface",
    "profile_dirs",
    "select_profile",
]
