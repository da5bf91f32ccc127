"""Shared fixtures. Tests that need ../shared/data skip with a reason when it is absent."""

import os
from pathlib import Path

import pytest
from servers import s3, s3_server, start_server, stop_server  # noqa: F401  (fixtures shared with benchmarks/)

REPO = Path(__file__).resolve().parents[2]

# FileList keeps parsed manifests in a cache directory (default ~/.cache): the tests' own one,
# shared by their subprocesses, so a run leaves nothing behind in the home directory.
if "LOADSCOPE_MANIFEST_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["LOADSCOPE_MANIFEST_CACHE"] = tempfile.mkdtemp(prefix="ls-manifests-")
    atexit.register(shutil.rmtree, os.environ["LOADSCOPE_MANIFEST_CACHE"], True)
SHARED = Path(os.environ.get("LOADSCOPE_SHARED_DATA", REPO.parent / "shared" / "data" / "real"))


# `make test` sets it (after scripts/check-shared-data.py): a test that needs the data fails.
REQUIRE_SHARED = os.environ.get("LOADSCOPE_REQUIRE_SHARED_DATA") == "1"


@pytest.fixture(scope="session")
def training_repo(tmp_path_factory, demo):
    """Writes a throwaway training repository: `training_repo(name, package, {module: source})`
    makes <tmp>/<name>/<package>/ with those modules and `data` linked to the demo dataset (the
    repository's data, relative to its root)."""
    def make(name: str, package: str, modules: dict) -> Path:
        root = tmp_path_factory.mktemp(name)
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
        for module, source in modules.items():
            (root / package / f"{module}.py").write_text(source)
        os.symlink(demo, root / "data")
        return root

    return make


@pytest.fixture(scope="session")
def real() -> Path:
    """The real test files of ../shared/data/real (see its README). Absent: the test fails
    under `make test`, and skips otherwise, counted in the summary at the end."""
    if not (SHARED / "README.md").exists():
        if REQUIRE_SHARED:
            pytest.fail(f"real test data not found at {SHARED} (LOADSCOPE_REQUIRE_SHARED_DATA=1)")
        pytest.skip(f"real test data not found at {SHARED}")
    return SHARED


def pytest_terminal_summary(terminalreporter):
    skipped = sum("real test data not found" in str(r.longrepr) for r in terminalreporter.stats.get("skipped", []))
    if skipped:
        terminalreporter.section("REAL TEST DATA MISSING", sep="!", red=True, bold=True)
        terminalreporter.line(f"{skipped} tests that compare against ../shared/data/real did NOT run: "
                              f"nothing at {SHARED}. `make test` refuses to run without it.", red=True)


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Path:
    """A small demo dataset made by the project's own generator (folder, shards, manifest)."""
    from loadscope import datasets

    out = tmp_path_factory.mktemp("demo") / "demo"
    datasets.generate(str(out), images=120, seed=0, shard_size=25, quiet=True, videos=0)
    return out


@pytest.fixture(scope="session")
def demo_videos(tmp_path_factory) -> Path:
    """Six demo videos (one per size and a few GOPs) from the project's generator."""
    import shutil

    from loadscope import datasets

    if shutil.which("ffmpeg") is None:  # the generator encodes them with the ffmpeg CLI
        pytest.skip("the demo videos are made with the ffmpeg CLI, which this machine does not have")

    out = tmp_path_factory.mktemp("demo_videos") / "demo"
    datasets.generate(str(out), images=1, seed=0, quiet=True, videos=6, video_shard_size=4)
    return out


@pytest.fixture(scope="session")
def video_720p(tmp_path_factory) -> Path:
    """A video like a dataset's: 10 s of 720p at 30 fps, H.264 with B-frames, a keyframe every
    2 s, grain (17 MB), its moov after its frames."""
    import subprocess

    out = tmp_path_factory.mktemp("video_720p") / "v.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=1280x720:r=30:d=10",
                    "-vf", "noise=alls=10:allf=t", "-c:v", "libx264", "-preset", "veryfast", "-bf", "2",
                    "-g", "60", "-keyint_min", "60", "-sc_threshold", "0", str(out)], check=True)
    return out


def native_threads() -> int:
    """Threads of this process right now."""
    return len(os.listdir("/proc/self/task"))


@pytest.fixture(scope="session")
def http_root(tmp_path_factory) -> Path:
    """What the HTTP server serves: tests copy their files here."""
    return tmp_path_factory.mktemp("www")


@pytest.fixture(scope="session")
def http_server(tmp_path_factory, http_root):
    """A real HTTP and HTTPS server (nginx) serving http_root, with /flaky/ (a 503 for one request
    in ten), /throttled/ (503s past 20 requests/s) and /slow/ (2 MiB/s) views of it; the HTTPS
    one has a CA made for the session."""
    d = tmp_path_factory.mktemp("http")
    env = start_server("http-server.sh", d, str(http_root))
    env["dir"] = str(d)
    yield env
    stop_server("http-server.sh", d)
