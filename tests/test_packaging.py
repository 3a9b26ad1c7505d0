"""What a release is made of: `vmem-lsp --version`, one version in every place that
states it, and an sdist that carries what the tests read (tests/data, examples/).
scripts/build_artifacts.sh builds the artifacts; .ci/run installs the wheel in a fresh venv."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from importlib.metadata import PackageNotFoundError, version

import pytest

import vmem_lsp
from vmem_lsp import versions
from vmem_lsp.cli import compiler

ROOT = pathlib.Path(__file__).resolve().parent.parent


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def installed(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def test_version_leads_with_the_compiler_that_checks(tmp_path):
    """vmem-lsp's version, then the jax, jaxlib and libtpu of the worker's Python (vmem-lsp's own
    here: a folder with no settings, no .venv and no VIRTUAL_ENV) against the tested pairs; the
    tool's own environment is not said again when it is that one."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    done = subprocess.run(
        [sys.executable, "-m", "vmem_lsp", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    said = ", ".join(f"{name} {installed(name)}" for name in ("jax", "jaxlib", "libtpu"))
    assert installed("jax") != "not installed"  # the tests run with jax[tpu]: the line shows a version
    assert done.stdout.splitlines() == [
        f"vmem-lsp {vmem_lsp.__version__}",
        f"compiler: {said} in {sys.executable} (vmem-lsp's own), a tested pair",
    ]


def test_version_does_not_import_jax():
    """--version reads metadata only, so it answers at once even where importing jax is slow."""
    code = (
        "import sys\nfrom vmem_lsp.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'libtpu')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_version_says_not_installed_for_a_missing_package(monkeypatch):
    import importlib.metadata

    from vmem_lsp import versions

    def version_without_libtpu(name):
        if name == "libtpu":
            raise importlib.metadata.PackageNotFoundError(name)
        return version(name)

    monkeypatch.setattr(versions, "version", version_without_libtpu)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    lines = compiler.version_text(str(ROOT / "tests" / "data")).splitlines()  # no settings, no .venv: its own
    assert lines[0] == f"vmem-lsp {vmem_lsp.__version__}"
    assert lines[1].startswith(
        f"compiler: jax {installed('jax')}, jaxlib {installed('jaxlib')}, libtpu not installed in "
    )
    assert lines[1].endswith(f", not a tested pair ({versions.tested_text()})"), lines


def test_one_version_everywhere():
    """pyproject.toml's version is the release's: the extension, its lock file, __version__ (what
    --version, the JSON report and `merge` say) and CHANGELOG.md's latest release say the same."""
    want = project_version()
    package = json.loads((ROOT / "editors" / "vscode" / "package.json").read_text())
    lock = json.loads((ROOT / "editors" / "vscode" / "package-lock.json").read_text())
    changelog = (ROOT / "CHANGELOG.md").read_text()
    latest = re.search(r"^## \[(\d[^\]]*)\]", changelog, re.M)
    assert {
        "editors/vscode/package.json": package["version"],
        "editors/vscode/package-lock.json": lock["version"],
        "editors/vscode/package-lock.json packages['']": lock["packages"][""]["version"],
        "vmem_lsp/__init__.py": vmem_lsp.__version__,
        "CHANGELOG.md's latest release": latest and latest.group(1),
    } == dict.fromkeys(
        [
            "editors/vscode/package.json",
            "editors/vscode/package-lock.json",
            "editors/vscode/package-lock.json packages['']",
            "vmem_lsp/__init__.py",
            "CHANGELOG.md's latest release",
        ],
        want,
    )


def has_build() -> bool:
    # The distribution, not `import build`: the checkout's build/ folder imports as a namespace package.
    try:
        version("build")
        return True
    except PackageNotFoundError:
        return False


@pytest.mark.skipif(
    not has_build() and not os.environ.get("VMEM_REQUIRE_TOOLS"),
    reason="needs `build` (pip install build, or the test extras)",
)
def test_the_sdist_carries_what_the_tests_read(tmp_path):
    """Every file of tests/data and examples/ (and the tests themselves) is in the sdist, so the
    tests run from an unpacked sdist; editor builds and caches are not."""
    if not has_build():
        pytest.fail("VMEM_REQUIRE_TOOLS is set but `build` is not installed")
    # From a copy without the checkout's vmem_lsp.egg-info: setuptools adds the files of a stale
    # SOURCES.txt there, so a line taken out of MANIFEST.in would go unseen.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=lambda folder, names: [
            name
            for name in names
            if name.endswith(".egg-info")
            or name == "node_modules"
            or (pathlib.Path(folder) == ROOT and name in (".git", ".venv", "build", "dist", ".vmem_lsp_cache"))
        ],
    )
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path), str(source)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sdist = tmp_path / f"vmem_lsp-{project_version()}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}

    def on_disk(folder: str) -> set[str]:
        return {
            str(path.relative_to(ROOT))
            for path in (ROOT / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and ".hypothesis" not in path.parts
        }

    wanted = on_disk("tests/data") | on_disk("examples") | {str(p.relative_to(ROOT)) for p in ROOT.glob("tests/*.py")}
    assert any(name.startswith("tests/data/") for name in wanted) and "examples/copy_whole.py" in wanted
    assert sorted(wanted - names) == []
    assert {
        "README.md",
        "pyproject.toml",
        "vmem_lsp/cli/__init__.py",
        "vmem_lsp/tpu/model_error.json",
        "editors/vscode/package.json",
    } <= names
    unwanted = [
        name
        for name in names
        if "__pycache__" in name or name.endswith((".pyc", ".vsix")) or "node_modules" in name.split("/")
    ]
    assert unwanted == []


TUNER = """\
import vmem_lsp


def matmul(x: object, y: object, bm: int = 512) -> object:
    return x


def tune() -> list[dict[str, object]]:
    verdict: vmem_lsp.Verdict = vmem_lsp.fits(matmul, "bf16[1024, 1024]", "bf16[1024, 1024]", target="v6e", bm=256)
    used: int | None = verdict.used
    print(used, verdict.fits, verdict.parts[:1])
    return vmem_lsp.prune(matmul, ("bf16[1024, 1024]",) * 2, [{"bm": 256}, {"bm": 512}], targets="v5e,v6e")


def planted() -> None:
    vmem_lsp.fits(matmul, "bf16[1024, 1024]", compile="no")
"""


def has_mypy() -> bool:
    try:
        version("mypy")
        return True
    except PackageNotFoundError:
        return False


@pytest.mark.skipif(
    not (has_build() and has_mypy()) and not os.environ.get("VMEM_REQUIRE_TOOLS"),
    reason="needs `build` and `mypy` (pip install build mypy)",
)
def test_the_wheel_is_typed_and_a_tuner_script_type_checks_against_it(tmp_path):
    """The wheel ships py.typed, so `mypy --strict` reads the API's annotations in a tuner's
    environment: a script using fits, prune and Verdict passes, but for the wrong call planted in it."""
    if not (has_build() and has_mypy()):
        pytest.fail("VMEM_REQUIRE_TOOLS is set but `build` or `mypy` is not installed")
    source = tmp_path / "source"  # setuptools writes build/ beside the sources: not into the checkout
    shutil.copytree(ROOT / "vmem_lsp", source / "vmem_lsp", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    run = dict(cwd=tmp_path, capture_output=True, text=True, timeout=600)
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(source)], **run)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = tmp_path.glob("vmem_lsp-*.whl")
    # A tuner's environment: the wheel alone (its dependencies' types are not what is checked here).
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, **run)
    [site] = env.glob("lib/python3*/site-packages")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    subprocess.run([*pip, "--target", str(site), str(wheel)], check=True, **run)
    assert (site / "vmem_lsp" / "py.typed").is_file()
    (tmp_path / "tune.py").write_text(TUNER)
    mypy = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--no-incremental",
        "--python-executable",
        str(env / "bin/python"),
    ]
    checked = subprocess.run([*mypy, "tune.py"], **run)
    planted = TUNER.splitlines().index('    vmem_lsp.fits(matmul, "bf16[1024, 1024]", compile="no")') + 1
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert errors == [
        f'tune.py:{planted}: error: Argument "compile" to "fits" has incompatible type "str"; expected "bool"  [arg-type]'
    ], checked.stdout + checked.stderr


def resolved(python: str, requirements: list[str], tmp_path) -> dict[str, str]:
    """What pip installs for `requirements` into a fresh environment of CPython `python` (a dry run
    against the package index, wheels only, as a new venv of that Python would get): {name: version}
    of jax, jaxlib and libtpu."""
    report = tmp_path / f"report-{python}.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
         "--ignore-installed", "--python-version", python, "--only-binary=:all:", "--target", str(tmp_path / "t"),
         "--report", str(report), *requirements],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    install = json.loads(report.read_text())["install"]
    return {
        i["metadata"]["name"]: i["metadata"]["version"]
        for i in install
        if i["metadata"]["name"] in versions.COMPILER_PACKAGES
    }


@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])
def test_the_install_lines_get_a_tested_jax_libtpu_pair_or_no_libtpu(python, tmp_path):
    """README's and the docs' lines make environments of vmem-lsp alone (a tool: `pipx install
    'vmem-lsp[tpu]'`, the first command's `.[tpu]`) or beside a project's jax. Resolved as pip
    resolves pyproject.toml's requirements for a fresh environment of each supported Python: with
    the `tpu` extra, a pair the tests run on (jax[tpu] pins its libtpu); without it, no libtpu at all
    (the worker says what to install), never the newest libtpu beside whatever jax."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = project["dependencies"]
    with_tpu = resolved(python, [*base, *project["optional-dependencies"]["tpu"]], tmp_path)
    assert versions.in_tested_range(with_tpu.get("jax"), with_tpu.get("libtpu")), with_tpu
    assert "libtpu" not in resolved(python, base, tmp_path)
