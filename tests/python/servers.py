"""The project's real servers for tests (scripts/s3-server.sh: Ceph radosgw; scripts/
http-server.sh: nginx), shared by tests/python and benchmarks/ (their conftests import the
fixtures), and the curl CLI as an independent S3 client to put test data in place."""

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def start_server(script: str, workdir: Path, *args: str) -> dict:
    """Starts one of the project's real servers (scripts/s3-server.sh, scripts/http-server.sh)
    and returns the variables it exports. Its daemons keep running until `stop`; their output
    goes to a file, not a pipe (a pipe held open by a daemon would never reach its end)."""
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


def stop_server(script: str, workdir: Path) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / script), "stop", str(workdir)], timeout=120, check=True)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (Ceph radosgw, single node, in memory) for this session: its AWS_*
    variables (endpoint, test credentials, region). Stopped by pid at the end."""
    d = tmp_path_factory.mktemp("s3")
    env = start_server("s3-server.sh", d)
    env["dir"] = str(d)
    yield env
    stop_server("s3-server.sh", d)


def curl_s3(env, *args) -> str:
    """The curl CLI, signing with SigV4: an independent client to put the test data in place
    (its status code; the body goes to /dev/null unless args name an -o file)."""
    out = subprocess.run(
        ["curl", "-s", "-S", *([] if "-o" in args else ["-o", "/dev/null"]), "-w", "%{http_code}", "--aws-sigv4", f"aws:amz:{env['AWS_REGION']}:s3",
         "--user", f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
         "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *args],
        capture_output=True, text=True, timeout=120)
    return out.stdout


def put_bucket(env, bucket: str, files=()) -> None:
    """Makes the bucket (or finds it there) and puts (key, local path) pairs in it."""
    ep = env["AWS_ENDPOINT_URL"]
    assert curl_s3(env, "-X", "PUT", f"{ep}/{bucket}") in ("200", "409")
    for key, path in files:
        assert curl_s3(env, "-T", str(path), f"{ep}/{bucket}/{key}") == "200", key


S3_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The S3 server's variables in this process's environment (read per request)."""
    for k in S3_VARIABLES:
        monkeypatch.setenv(k, s3_server[k])
    for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    return s3_server
