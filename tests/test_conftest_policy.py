"""The engine-marker policy of tests/conftest.py: run, skip or fail a test by its markers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engines.availability import (
    CHECKS,
    REQUIRE_VARIABLE,
    Verdict,
    missing_reason,
    require_engines,
    verdict,
)

pytest_plugins = ["pytester"]

MARKERS = (
    "slurm", "mpi", "torchrun", "deepspeed", "lightning", "docker", "podman", "multinode",
    "shellcheck", "ssh", "gpu",
)  # fmt: skip


def _missing(*engines: str) -> dict[str, str]:
    return {engine: f"no {engine} here" for engine in engines}


def test_every_declared_marker_has_one_check(pytestconfig: pytest.Config) -> None:
    declared = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert set(MARKERS) <= declared
    assert set(CHECKS) == set(MARKERS)


@pytest.mark.parametrize(
    ("markers", "missing", "require", "expected"),
    [
        ((), _missing("slurm"), True, Verdict("run")),
        (("parametrize", "skipif"), _missing(*MARKERS), True, Verdict("run")),
        (("slurm",), {}, True, Verdict("run")),
        (("slurm",), _missing("slurm"), False, Verdict("skip", "slurm: no slurm here")),
        (
            ("slurm",),
            _missing("slurm"),
            True,
            Verdict("fail", f"{REQUIRE_VARIABLE}=1 but engines are missing: slurm: no slurm here"),
        ),
        (("gpu",), _missing("gpu"), True, Verdict("skip", "gpu: no gpu here")),
        (("gpu",), _missing("gpu"), False, Verdict("skip", "gpu: no gpu here")),
        (("mpi", "slurm"), _missing("mpi"), False, Verdict("skip", "mpi: no mpi here")),
        (
            ("gpu", "torchrun"),
            _missing("gpu", "torchrun"),
            True,
            Verdict(
                "fail",
                f"{REQUIRE_VARIABLE}=1 but engines are missing: "
                "gpu: no gpu here; torchrun: no torchrun here",
            ),
        ),
        (("slurm", "slurm"), _missing("slurm"), False, Verdict("skip", "slurm: no slurm here")),
    ],
    ids=[
        "no-marker-runs",
        "non-engine-markers-run",
        "engine-present-runs",
        "missing-skips",
        "missing-fails-when-required",
        "gpu-skips-even-when-required",
        "gpu-skips",
        "only-the-missing-engine-is-named",
        "gpu-plus-required-engine-fails",
        "repeated-marker-named-once",
    ],
)
def test_verdict(
    markers: tuple[str, ...], missing: dict[str, str], require: bool, expected: Verdict
) -> None:
    assert verdict(markers, missing.get, require) == expected


def test_verdict_probes_only_the_tests_engines() -> None:
    probed: list[str] = []

    def probe(engine: str) -> str | None:
        probed.append(engine)
        return None

    verdict(["mpi", "parametrize"], probe, require=True)
    assert probed == ["mpi"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, False), ({REQUIRE_VARIABLE: "0"}, False), ({REQUIRE_VARIABLE: "1"}, True)],
)
def test_require_engines(env: dict[str, str], expected: bool) -> None:
    assert require_engines(env) is expected


@pytest.mark.parametrize("value", ["", "yes", "true", " 1"])
def test_require_engines_rejects_other_values(value: str) -> None:
    with pytest.raises(ValueError, match=rf"{REQUIRE_VARIABLE}='{value}': expected 1 .* or 0"):
        require_engines({REQUIRE_VARIABLE: value})


@pytest.fixture
def policy_pytester(pytester: pytest.Pytester) -> Iterator[pytest.Pytester]:
    """A pytest project using this repository's conftest hooks, run in this process.

    The engine checks are cached per process: the cache is emptied around the inner run so
    that it sees its own PATH and the outer session keeps seeing the real one.
    """
    pytester.makeconftest("from tests.conftest import pytest_configure, pytest_runtest_setup\n")
    pytester.makeini("[pytest]\naddopts = --strict-markers\nmarkers =\n    mpi: needs MPI\n")
    pytester.makepyfile(
        """
        import pytest

        def test_plain():
            pass

        @pytest.mark.mpi
        def test_mpi():
            pass
        """
    )
    missing_reason.cache_clear()
    yield pytester
    missing_reason.cache_clear()


@pytest.mark.parametrize(("require", "outcome"), [("0", "skipped"), ("1", "errors")])
def test_hooks_apply_the_policy(
    policy_pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    require: str,
    outcome: str,
) -> None:
    monkeypatch.setenv(REQUIRE_VARIABLE, require)
    monkeypatch.setenv("PATH", "")
    result = policy_pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, **{outcome: 1})
    if require == "1":
        result.stdout.fnmatch_lines(["*mpi: not on PATH: mpirun*"])


def test_hooks_reject_a_malformed_require_variable(
    policy_pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REQUIRE_VARIABLE, "yes")
    result = policy_pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{REQUIRE_VARIABLE}='yes'*"])


def test_a_command_past_its_timeout_fails_as_killed_by_its_hang_guard(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest("from tests.conftest import pytest_runtest_makereport\n")
    pytester.makepyfile(
        """
        import subprocess, sys

        def test_slow():
            subprocess.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*killed by its hang guard: `*time.sleep(30)*` was still running after 0.5 s*"]
    )
