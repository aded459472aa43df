"""``ddpimg doctor``'s measuring side: the nodes it finds among the ranks' reports, and a rank
that stops before the process group when the profile names an interface this host lacks."""

from __future__ import annotations

from pathlib import Path

from ddpimg.plan import build_plan
from ddpimg.runtime.doctor import NotJoined, RankReport, node_list, run_checks


def test_nodes_come_in_rank_order_with_their_ranks() -> None:
    rows = [
        RankReport(rank=r, host=h, local_rank=0, local_world_size=2, node_rank=0)
        for r, h in [(2, "b"), (0, "a"), (3, "b"), (1, "a")]
    ]
    assert node_list(rows) == [("a", [0, 1]), ("b", [2, 3])]


def test_a_missing_interface_stops_the_rank_before_it_meets_the_others(tmp_path: Path) -> None:
    profile = tmp_path / "fabric.toml"
    profile.write_text(
        '[site]\nname = "fabric"\ndescription = "a site whose fabric is ib7"\n'
        '[network]\ninterfaces = ["ib7"]\nmaster_addr = "{node}"\n'
    )
    result = run_checks(build_plan({}, "h", site=str(profile)), timeout_s=5)
    assert isinstance(result, NotJoined)
    assert result.rank == 0
    assert len(result.problems) == 1
    assert result.problems[0].startswith(
        f"interface ib7 (profile fabric) does not exist on {result.host}"
    )
