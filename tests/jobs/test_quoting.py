"""Hostile values in every field of a job run nothing: rendered from the command line, a job
file or a site profile, a value is either refused (a named error, exit status 2) or reaches
the command it is meant for as one intact argument, and the script runs with nothing but
the stub ``srun``, runtimes and ``train`` of :mod:`tests.jobs.stubs`.

Each hostile value tries to create a marker file by a way out of shell quoting (``;``,
``$(...)``, backticks, quotes, a newline, ``${IFS}``, a redirection, a pipe); Hypothesis adds
the characters around it and picks the field, the layer that gives it and the runtime. The
script then runs under real bash: the marker must not exist, the script must succeed, and
the value must arrive whole where it belongs (an argument, a bind, an ``#SBATCH`` line).
"""

from __future__ import annotations

import json
import shlex
import string
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import tomllib
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ddpimg.cli import build_parser
from ddpimg.cli.sbatch_cmd import prepare
from ddpimg.errors import DdpimgError
from ddpimg.jobs.fields import FIELD_BY_NAME
from ddpimg.site.container import RUNTIMES
from ddpimg.site.fabric import split_bind
from tests.jobs.stubs import FAIL_VAR, Call, ScriptRun, install_stubs, run_script

MARKER = "MARKER"
# Ways out of quoting, each creating MARKER if the shell ever parses it as code.
ESCAPES = (
    ";touch${IFS}MARKER;#",
    "$(touch MARKER)",
    "`touch MARKER`",
    "'$(touch MARKER)'",
    '"$(touch MARKER)"',
    "x';touch MARKER;'",
    'x";touch MARKER;"',
    "\ntouch MARKER\n",
    ">MARKER",
    "|touch${IFS}MARKER",
    "&touch${IFS}MARKER&",
    "<(touch MARKER)",
    "\\$(touch MARKER)",
    "${IFS}$(touch${IFS}MARKER)",
)
AROUND = string.ascii_letters[:4] + "/.,:=;$(){}`'\"\\|&<> \n*#!-"

FLAG, JOB_FILE, PROFILE = "flag", "job file", "profile"
# The string fields of a job and the layers that may give each; `command` is the training
# command, whose words are tried as an option's value, an argument and a script's argument.
FIELD_LAYERS: dict[str, tuple[str, ...]] = {
    name: (FLAG, JOB_FILE, PROFILE) if FIELD_BY_NAME[name].from_profile else (FLAG, JOB_FILE)
    for name in (
        "gpu_type", "time", "partition", "qos", "account", "constraint", "mem", "cpu_bind",
        "job_name", "array", "output", "image", "binds", "data_image", "stage_data",
        "local_dir", "sbatch_options", "command", "ddpimg_from",
    )
} | {  # profile keys outside [job] that reach the script
    "fabric.binds": (PROFILE,), "container.options": (PROFILE,),
    "container.image": (PROFILE,), "container.annotations": (PROFILE,),
    "site.description": (PROFILE,), "job.modules": (PROFILE,), "job.module_use": (PROFILE,),
}  # fmt: skip
# Fields whose value takes another path for each runtime; the others use apptainer.
BY_RUNTIME = ("binds", "fabric.binds", "image", "container.image", "container.options",
              "stage_data")  # fmt: skip
# A value keeps the form its field requires around the hostile part.
FORMS = {"sbatch_options": "--comment={}", "fabric.binds": "/{}", "stage_data": "data/{}",
         "container.options": "--x={}", "local_dir": "$TMPDIR/{}", "ddpimg_from": "/{}",
         "job.module_use": "/{}"}  # fmt: skip
# The #SBATCH line of a field whose line is not --name=VALUE.
DIRECTIVES = {"gpu_type": "--gres=gpu:{}:2", "sbatch_options": "{}"}
STEP_PROGRAMS = ("apptainer", "singularity", "docker", "podman-hpc", "train")
BASE_ARGS = ["--nodes", "2", "--time", "1:00:00", "--gpus-per-node", "2", "--cpus-per-task", "2"]
COMMAND = ["train", "mnist", "--epochs", "1"]
COMMAND_SLOTS = ("option", "argument", "script")


@dataclass(frozen=True)
class Case:
    """One hostile value in one field, given by one layer, on one runtime."""

    field: str
    layer: str
    value: str
    runtime: str = "apptainer"
    command_slot: str = "option"  # for `command`

    @property
    def given(self) -> str:
        """The value as the field receives it."""
        return FORMS.get(self.field, "{}").format(self.value)


@st.composite
def hostile_values(draw: st.DrawFn) -> str:
    escape = draw(st.sampled_from(ESCAPES))
    before = draw(st.text(alphabet=AROUND, max_size=3))
    after = draw(st.text(alphabet=AROUND, max_size=3))
    return before + escape + after


def cases() -> st.SearchStrategy[Case]:
    """A field (each as likely), a layer that may give it, a hostile value, a runtime."""

    def for_field(field: str) -> st.SearchStrategy[Case]:
        if field == "container.annotations":
            runtimes: tuple[str, ...] = ("edf",)
        elif field == "command":
            runtimes = ("none",)  # the stub train itself gets the words
        elif field in BY_RUNTIME:
            runtimes = tuple(RUNTIMES)
        else:
            runtimes = ("apptainer",)
        return st.builds(
            Case,
            st.just(field),
            st.sampled_from(FIELD_LAYERS[field]),
            hostile_values(),
            st.sampled_from(runtimes),
            st.sampled_from(COMMAND_SLOTS),
        )

    return st.sampled_from(sorted(FIELD_LAYERS)).flatmap(for_field)


def _toml(value: object) -> str:
    """A TOML value: JSON's string escapes are TOML's for the characters drawn here."""
    return json.dumps(value)


def _profile_text(case: Case) -> str:
    """A profile named `hostile` whose key for ``case.field`` holds the hostile value."""
    sections: dict[str, dict[str, str]] = {
        "site": {"name": _toml("hostile")},
        "container": {"runtime": _toml(case.runtime)},
        "job": {},
        "fabric": {},
    }
    dotted = case.field if "." in case.field else f"job.{case.field}"
    section, _, name = dotted.partition(".")
    if name == "annotations":
        sections["container.annotations"] = {_toml("com.example.hostile"): _toml(case.given)}
    else:
        is_list = name in ("binds", "options", "modules", "module_use")
        sections[section][name] = _toml([case.given] if is_list else case.given)
    if name == "module_use":
        # A profile's module paths are used only to load its modules (none: no module line).
        sections["job"]["modules"] = _toml(["apptainer"])
    return "".join(
        f"[{title}]\n" + "".join(f"{key} = {value}\n" for key, value in keys.items())
        for title, keys in sections.items()
    )


def _command(case: Case) -> list[str]:
    if case.field != "command":
        return list(COMMAND)
    return {
        "option": [*COMMAND, "--out", case.given],
        "argument": [*COMMAND, case.given],
        "script": ["train", "--script", "job.py", case.given],
    }[case.command_slot]


def sbatch_args(case: Case, work: Path) -> list[str]:
    """`ddpimg sbatch`'s arguments for ``case``; its job file or profile is written to work."""
    args = ["sbatch", *BASE_ARGS, f"--runtime={case.runtime}"]
    if case.field == "local_dir":
        args.append("--stage-data=data")  # the node-local directory is used for staging
    if case.field == "ddpimg_from":
        args.append("--image=site.sif")  # ddpimg installed for an image of the site's
    if case.layer == PROFILE:
        (work / "hostile.toml").write_text(_profile_text(case))
        args.append(f"--site={work / 'hostile.toml'}")
    else:
        args.append("--site=generic")
    command = _command(case)
    if case.layer == JOB_FILE:
        if case.field == "command":
            entry = command
            command = []
        else:
            entry = [case.given] if FIELD_BY_NAME[case.field].kind is list else case.given
        (work / "job.toml").write_text(f"{case.field} = {_toml(entry)}\n")
        args.append(f"--config={work / 'job.toml'}")
    elif case.layer == FLAG and case.field != "command":
        args.append(f"{FIELD_BY_NAME[case.field].option}={case.given}")
    return [*args, "--", *command] if command else args


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_stubs(tmp_path_factory.mktemp("stubs"))


def run_case(case: Case, stub_dir: Path, refusal_allowed: bool = True) -> str:
    """Render ``case`` as `ddpimg sbatch` would; a refusal is fine (where allowed), anything
    rendered must run nothing but the stubs and hand the value on intact. Returns which
    it was: "refused" or "rendered"."""
    with tempfile.TemporaryDirectory(prefix="ddpimg-hostile-") as name:
        work = Path(name)
        marker = work / "marker"
        case = replace(case, value=case.value.replace(MARKER, str(marker)))
        try:
            parsed = build_parser().parse_args(sbatch_args(case, work))
            script = prepare(parsed, {}, "example-host").script()
        except DdpimgError:
            if refusal_allowed:
                return "refused"  # a named error, exit status 2 at the command line
            raise
        result = run_script(script, work, stub_dir)
        assert not marker.exists(), f"{case}: the script ran hostile code\n{script}"
        _check_outcome(case, script, result, work)
    return "rendered"


def _check_outcome(case: Case, script: str, result: ScriptRun, work: Path) -> None:
    value = case.given
    if case.field == "local_dir" and "unbound variable" in result.stderr:
        return  # the value names a variable this "node" does not set: bash stops at once
    assert result.returncode == 0, f"{case}: status {result.returncode}\n{result.stderr}"
    steps = [call for call in result.calls if call.program in STEP_PROGRAMS]
    assert len(steps) == 1, result.calls
    step = steps[0].argv
    srun = [call.argv for call in result.calls if call.program == "srun"]
    if case.field in ("binds", "fabric.binds"):
        assert _bind_arrived(value, case.runtime, step, srun[-1], work), (step, srun)
    elif case.field in ("image", "container.image"):
        assert _image_arrived(value, case.runtime, step, srun[-1], work), (step, srun)
    elif case.field == "container.options" and case.runtime != "none":
        assert value in step + srun[-1], (step, srun)
    elif case.field == "data_image":
        assert f"{value}:/data:image-src=/" in step, step
    elif case.field == "command":
        assert value in step, step
    elif case.field == "ddpimg_from":
        assert value.rstrip("/") + "/bin/train" in step, step
    elif case.field in ("job.modules", "job.module_use"):
        verb = "load" if case.field == "job.modules" else "use"
        modules = [call.argv for call in result.calls if call.program == "module"]
        assert [verb, value] in modules, modules
    elif case.field == "cpu_bind":
        assert f"--cpu-bind={value}" in srun[-1], srun
    elif case.field == "stage_data":
        copy = next(call.argv for call in result.calls if call.program == "cp")
        assert copy[-2] == value.rstrip("/") + "/.", copy
    elif case.field == "container.annotations":
        edf = tomllib.loads((work / "ddpimg-42.toml").read_text())
        assert edf["annotations"]["com"]["example"]["hostile"] == value
    elif case.field in FIELD_BY_NAME and case.field != "local_dir":
        line = DIRECTIVES.get(case.field, FIELD_BY_NAME[case.field].option + "={}")
        assert f"#SBATCH {line.format(value)}\n" in script


def _after(argv: list[str], option: str) -> list[str]:
    """The words that follow each ``option`` in ``argv``."""
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == option]


def _edf(work: Path) -> dict[str, object]:
    return tomllib.loads((work / "ddpimg-42.toml").read_text())


def _bind_arrived(bind: str, runtime: str, step: list[str], srun: list[str], work: Path) -> bool:
    """Whether ``bind`` reached the runtime whole, in the runtime's own form."""
    both = ":".join(split_bind(bind))
    if runtime in ("apptainer", "singularity"):
        return any(bind in words.split(",") for words in _after(step, "--bind"))
    if runtime in ("docker", "podman-hpc"):
        return both in _after(step, "--volume")
    if runtime == "pyxis":
        mounts = [word.partition("=")[2] for word in srun if word.startswith("--container-mou")]
        return both in mounts[0].split(",")
    if runtime == "edf":
        return both in _edf(work)["mounts"]  # type: ignore[operator]
    return True  # no container: nothing to bind


def _image_arrived(image: str, runtime: str, step: list[str], srun: list[str], work: Path) -> bool:
    if runtime == "pyxis":
        return f"--container-image={image}" in srun
    if runtime == "edf":
        expected = image if image.startswith("/") else "${PWD}/" + image.removeprefix("./")
        return _edf(work)["image"] == expected
    return runtime == "none" or image in step


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,  # the same 300 cases on every machine: CI cannot draw a new one
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
def test_hostile_values_run_nothing(case: Case, stubs: Path) -> None:
    # --hypothesis-show-statistics shows how often each field was refused or rendered.
    event(f"{case.field}: {run_case(case, stubs)}")


# The holes found by hand (issue 27), each from every layer that may give it: each must
# render, and run nothing.
@pytest.mark.parametrize(
    "case",
    [
        *(Case("binds", layer, "/x;touch${IFS}MARKER;#") for layer in (FLAG, JOB_FILE, PROFILE)),
        Case("fabric.binds", PROFILE, "x;touch${IFS}MARKER;#"),
        Case("cpu_bind", FLAG, "cores;touch${IFS}MARKER"),
        Case("cpu_bind", PROFILE, "$(touch${IFS}MARKER)"),
        Case("stage_data", FLAG, "$(touch${IFS}MARKER)"),
        Case("container.options", PROFILE, "--contain;touch${IFS}MARKER"),
        Case("container.options", PROFILE, "--x=$(touch${IFS}MARKER)", runtime="pyxis"),
    ],
    ids=lambda case: f"{case.field}-{case.layer}-{case.runtime}",
)
def test_the_known_holes_are_quoted(case: Case, stubs: Path) -> None:
    run_case(case, stubs, refusal_allowed=False)


@pytest.mark.parametrize(
    "value",
    ["$(touch${IFS}MARKER)", "${X:-`touch${IFS}MARKER`}", '/tmp"$(touch${IFS}MARKER)"',
     "${X:=/tmp}", "$X\\$(touch${IFS}MARKER)"],
)  # fmt: skip
def test_a_local_directory_beyond_plain_variables_is_refused(value: str, stubs: Path) -> None:
    with pytest.raises(DdpimgError, match="is not a path the script can expand safely"):
        run_case(Case("local_dir", FLAG, value), stubs, refusal_allowed=False)


def test_an_annotation_name_must_be_a_dotted_name(tmp_path: Path) -> None:
    profile = tmp_path / "hostile.toml"
    profile.write_text(
        '[site]\nname = "hostile"\n[container]\nruntime = "edf"\n'
        '[container.annotations]\n"a\\nEDF\\ntouch x" = "1"\n'
    )
    args = ["sbatch", *BASE_ARGS, f"--site={profile}", "--", *COMMAND]
    with pytest.raises(DdpimgError, match="is not a dotted name"):
        prepare(build_parser().parse_args(args), {}, "h")


@pytest.mark.parametrize(
    ("local_dir", "expected"),
    [("$LOCAL_SCRATCH", "{work}/scratch"), ("${TMPDIR:-/tmp}/me", "{work}/local/me"),
     ("${LOCAL_SCRATCH}/${USER}", "{work}/scratch/me")],
)  # fmt: skip
def test_plain_variables_in_the_local_directory_are_expanded_on_the_node(
    local_dir: str, expected: str, stubs: Path
) -> None:
    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        args = ["sbatch", *BASE_ARGS, "--site=generic", "--stage-data=data",
                f"--local-dir={local_dir}", "--", *COMMAND]  # fmt: skip
        script = prepare(build_parser().parse_args(args), {}, "h").script()
        node = {"LOCAL_SCRATCH": f"{work}/scratch", "USER": "me"}
        result = run_script(script, work, stubs, node)
        made = next(call.argv for call in result.calls if call.program == "mkdir")
        assert made == ["-p", "--", f"{expected.format(work=work)}/ddpimg-data-42"]


def test_a_failed_staging_names_the_directory_without_running_it(stubs: Path) -> None:
    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        marker = work / "marker"
        value = f"/nonexistent/$(touch${{IFS}}{marker})"
        args = ["sbatch", *BASE_ARGS, "--site=generic", f"--stage-data={value}", "--",
                *COMMAND]  # fmt: skip
        script = prepare(build_parser().parse_args(args), {}, "h").script()
        result = run_script(script, work, stubs, {FAIL_VAR: "cp"})
        assert not marker.exists()
        assert result.returncode == 1
        assert f"ddpimg: staging {value} to {work}/local/ddpimg-data-42 failed" in result.stderr
        assert "train" not in [call.program for call in result.calls]


def test_stubs_see_each_word_as_the_shell_passes_it(stubs: Path) -> None:
    """The stubs record exactly what they are given: the tests above rely on it."""
    with tempfile.TemporaryDirectory() as name:
        words = ["a b", "$(x)", "'", "\n", ""]
        script = f"#!/bin/bash\nsrun --nodes=1 train {shlex.join(words)}\n"
        result = run_script(script, Path(name), stubs)
        assert result.returncode == 0, result.stderr
        assert result.calls == [
            Call("srun", ["--nodes=1", "train", *words]),
            Call("train", words),
        ]
