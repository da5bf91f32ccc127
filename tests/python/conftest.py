"""Shared fixtures. Tests that need ../shared/data skip with a reason when it is absent."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("LOADSCOPE_SHARED_DATA", REPO.parent / "shared" / "data" / "real"))


@pytest.fixture(scope="session")
def real() -> Path:
    """The real test files of ../shared/data/real (see its README)."""
    if not (SHARED / "README.md").exists():
        pytest.skip(f"real test data not found at {SHARED}")
    return SHARED


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


def native_threads() -> int:
    """Threads of this process right now."""
    return len(os.listdir("/proc/self/task"))


def _start_server(script: str, workdir: Path, *args: str) -> dict:
    """Starts one of the project's real servers (scripts/s3-server.sh, scripts/http-server.sh)
    and returns the variables it exports. Its daemons keep running until `stop`; their output
    goes to a file, not a pipe (a pipe held open by a daemon would never reach its end)."""
    import subprocess

    log = workdir / "start.log"
    with open(log, "w") as out:
        rc = subprocess.run(["bash", str(REPO / "scripts" / script), "start", str(workdir), *args],
                            stdout=out, stderr=subprocess.STDOUT, timeout=600).returncode
    if rc != 0:
        subprocess.run(["bash", str(REPO / "scripts" / script), "stop", str(workdir)], timeout=120)
        raise RuntimeError(f"{script} start failed ({rc}):\n{log.read_text()[-3000:]}")
    env = {}
    for line in (workdir / "env").read_text().splitlines():
        if line.startswith("export "):
            k, _, v = line[len("export "):].partition("=")
            env[k] = v.strip("'\"")
    return env


def _stop_server(script: str, workdir: Path) -> None:
    import subprocess

    subprocess.run(["bash", str(REPO / "scripts" / script), "stop", str(workdir)], timeout=120, check=True)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (Ceph radosgw, single node, in memory) for this session: its AWS_*
    variables (endpoint, test credentials, region). Stopped by pid at the end."""
    d = tmp_path_factory.mktemp("s3")
    env = _start_server("s3-server.sh", d)
    env["dir"] = str(d)
    yield env
    _stop_server("s3-server.sh", d)


@pytest.fixture(scope="session")
def http_root(tmp_path_factory) -> Path:
    """What the HTTP server serves: tests copy their files here."""
    return tmp_path_factory.mktemp("www")


@pytest.fixture(scope="session")
def http_server(tmp_path_factory, http_root):
    """A real HTTP and HTTPS server (nginx) serving http_root, with /throttled/ (503s past 20
    requests/s) and /slow/ (2 MiB/s) views of it; the HTTPS one has a CA made for the session."""
    d = tmp_path_factory.mktemp("http")
    env = _start_server("http-server.sh", d, str(http_root))
    env["dir"] = str(d)
    yield env
    _stop_server("http-server.sh", d)
