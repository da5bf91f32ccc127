"""Writes the THIRD-PARTY notice into a repaired wheel, from what the wheel really holds
(scripts/build-wheel.sh, step 4).

For every library `auditwheel repair` copied into loadscope.libs/ it finds the file it was
copied from (the unrepaired extension's dependencies, resolved by the dynamic loader as the
repair did), the Debian package that installed that file (dpkg), the package's version and
copyright file, with the library's own licence from LIBRARY_LICENCE, or, for the FFmpeg built by
scripts/build-ffmpeg.sh, its LGPL licence, source and configure line. The wheel gets
loadscope/THIRD-PARTY.md (for people), loadscope/THIRD-PARTY.json (read by `loadscope --version`
and every experiment's env.json) and loadscope/third_party/ (each licence text in full).

    python scripts/wheel-notice.py REPAIRED.whl --raw UNREPAIRED.whl --ffmpeg PREFIX
"""

import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# auditwheel names a copied library <stem>-<8 hex digits of its hash><rest>, the stem being the
# file name up to its first dot.
BUNDLED = re.compile(r"^(?P<stem>[^.]+)-[0-9a-f]{8}(?P<rest>\..*)$")

# The licence of each library as built (SPDX where there is an identifier), by source project. A
# Debian copyright file lists every licence in the whole source package (build scripts, tests,
# tools) and is copied in full beside this; what users ask is the library's own licence, kept
# here by hand. A library from a project not listed stops the build: someone decides first.
LIBRARY_LICENCE = {
    "FFmpeg": "LGPL-2.1-or-later (built with --disable-gpl --disable-nonfree)",
    "brotli": "MIT",
    "bzip2": "bzip2-1.0.6 (BSD-style)",
    "curl": "curl (MIT-style)",
    "cyrus-sasl2": "BSD-style (Carnegie Mellon)",
    "dav1d": "BSD-2-Clause",
    "e2fsprogs": "MIT-style (libcom_err)",
    "gmp": "LGPL-3.0-or-later OR GPL-2.0-or-later",
    "gnutls28": "LGPL-2.1-or-later",
    "keyutils": "LGPL-2.1-or-later (libkeyutils)",
    "krb5": "MIT-style (MIT Kerberos)",
    "libffi": "MIT",
    "libidn2": "LGPL-3.0-or-later OR GPL-2.0-or-later",
    "libjpeg-turbo": "IJG AND BSD-3-Clause AND Zlib",
    "libpsl": "MIT",
    "libssh2": "BSD-3-Clause",
    "libtasn1-6": "LGPL-2.1-or-later",
    "libunistring": "LGPL-3.0-or-later OR GPL-2.0-or-later",
    "libwebp": "BSD-3-Clause",
    "libzstd": "BSD-3-Clause OR GPL-2.0-only",
    "nettle": "LGPL-3.0-or-later OR GPL-2.0-or-later",
    "nghttp2": "MIT",
    "onetbb": "Apache-2.0",
    "openldap": "OLDAP-2.8",
    "openssl": "Apache-2.0",
    "p11-kit": "BSD-3-Clause",
    "rtmpdump": "LGPL-2.1-or-later (librtmp)",
    "xz-utils": "public domain (liblzma)",
}


def resolved_dependencies(raw_wheel: Path, ffmpeg_lib: Path) -> dict:
    """{file name: path} of every shared library the unrepaired extension loads, transitively,
    as the repair resolved them (the carried FFmpeg first)."""
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(raw_wheel) as z:
        name = next(n for n in z.namelist() if re.match(r"loadscope/_native\..*\.so$", n))
        ext = Path(z.extract(name, tmp))
        env = dict(os.environ, LD_LIBRARY_PATH=str(ffmpeg_lib))
        out = subprocess.run(["ldd", str(ext)], capture_output=True, text=True, env=env, check=True).stdout
    deps = {}
    for line in out.splitlines():
        m = re.match(r"\s*\S+ => (/\S+) \(", line)
        if m:
            real = Path(m.group(1)).resolve()
            deps[real.name] = real
    return deps


def debian_package(path: Path) -> str:
    # Debian's merged /usr: a file is registered under /lib or /usr/lib, whichever the package says.
    variants = {str(path), str(path).replace("/usr/lib/", "/lib/", 1), str(path).replace("/lib/", "/usr/lib/", 1)}
    for p in variants:
        out = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.split(":")[0]
    sys.exit(f"wheel-notice: no Debian package installed {path}: cannot name its licence")


def describe(bundled: str, deps: dict, ffmpeg: Path) -> dict:
    m = BUNDLED.match(bundled)
    if not m:
        sys.exit(f"wheel-notice: {bundled} is not named as auditwheel names a copied library")
    original = m.group("stem") + m.group("rest")
    path = deps.get(original)
    if path is None:
        sys.exit(f"wheel-notice: {bundled}: {original} is not among the extension's dependencies")
    entry = {"file": f"loadscope.libs/{bundled}", "copied_from": str(path)}
    if path.is_relative_to(ffmpeg.resolve()):
        entry.update(project="FFmpeg", licence=LIBRARY_LICENCE["FFmpeg"], licence_file="third_party/FFmpeg.LGPLv2.1.txt",
                     **dict(line.split(": ", 1) for line in (ffmpeg / "SOURCE").read_text().splitlines()))
        entry["version"] = entry["source"].split("ffmpeg ", 1)[1].split(" ")[0]
        return entry
    package = debian_package(path)
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True,
                             check=True).stdout
    source = subprocess.run(["dpkg-query", "-W", "-f=${source:Package}", package], capture_output=True, text=True,
                            check=True).stdout
    if source not in LIBRARY_LICENCE:
        sys.exit(f"wheel-notice: {bundled} comes from {source} ({package}), whose licence is not in "
                 "LIBRARY_LICENCE: read /usr/share/doc/{package}/copyright and add it, or keep it out of the wheel")
    copyright_file = Path(f"/usr/share/doc/{package}/copyright").resolve()
    entry.update(project=source, debian_package=package, version=version, licence=LIBRARY_LICENCE[source],
                 licence_file=f"third_party/{source}.copyright.txt",
                 source=f"Debian source package {source} {version} (https://sources.debian.org/src/{source}/)")
    entry["_text"] = str(copyright_file)
    return entry


def markdown(entries: list, wheel: str) -> str:
    lines = [f"# Third-party libraries in {wheel}", "",
             "loadscope itself is under the Apache License 2.0. The wheel carries the shared libraries its",
             "extension needs that are not part of the base system (`auditwheel repair`), each as built by",
             "Debian 12, except FFmpeg: built from Debian's source package with only the decoders loadscope",
             "uses and no GPL or non-free part (configure line below). Every library is a separate shared",
             "object in loadscope.libs/; replacing an LGPL one with a compatible build of your own (same",
             "soname) is supported. The full licence texts (Debian's copyright files, FFmpeg's",
             "COPYING.LGPLv2.1) are in loadscope/third_party/. Generated by scripts/wheel-notice.py from the",
             "wheel's contents.", "",
             "| Project | Version | Licence of the library | Files in loadscope.libs/ | Full text |", "|---|---|---|---|---|"]
    projects: dict = {}
    for e in entries:
        projects.setdefault(e["project"], []).append(e)
    for project, group in projects.items():
        files = ", ".join(f"`{e['file'].split('/', 1)[1]}`" for e in group)
        e = group[0]
        lines.append(f"| {project} | {e['version']} | {e['licence']} | {files} | `{e['licence_file']}` |")
    lines += ["", "## Sources", ""]
    for project, group in projects.items():
        lines.append(f"- {project}: {group[0]['source']}")
        if "configure" in group[0]:
            lines.append(f"  - configure: `{group[0]['configure']}`")
    return "\n".join(lines) + "\n"


def rewrite(wheel: Path, added: dict) -> None:
    """Adds files to the wheel and writes its RECORD again (hash and size of every file)."""
    with zipfile.ZipFile(wheel) as z:
        files = {i.filename: (i, z.read(i)) for i in z.infolist()}
    record_name = next(n for n in files if n.endswith(".dist-info/RECORD"))
    for name, data in added.items():
        files[name] = (zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
        files[name][0].external_attr = 0o644 << 16
        files[name][0].compress_type = zipfile.ZIP_DEFLATED
    rows = []
    for name, (_, data) in files.items():
        if name == record_name or name.endswith("/"):
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    rows.append(f"{record_name},,")
    files[record_name] = (files[record_name][0], ("\n".join(rows) + "\n").encode())
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for name, (info, data) in files.items():
            if name != record_name:
                out.writestr(info, data)
        out.writestr(files[record_name][0], files[record_name][1])  # RECORD last, as wheels have it
    tmp.replace(wheel)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--raw", type=Path, required=True, help="the wheel before auditwheel repair")
    ap.add_argument("--ffmpeg", type=Path, required=True, help="the prefix scripts/build-ffmpeg.sh made")
    args = ap.parse_args()
    deps = resolved_dependencies(args.raw, args.ffmpeg / "lib")
    with zipfile.ZipFile(args.wheel) as z:
        bundled = sorted(n.split("/", 1)[1] for n in z.namelist() if n.startswith("loadscope.libs/") and n[-1] != "/")
    if not bundled:
        sys.exit(f"wheel-notice: {args.wheel} carries no libraries (was it repaired?)")
    entries = [describe(b, deps, args.ffmpeg) for b in bundled]
    added = {"loadscope/third_party/FFmpeg.LGPLv2.1.txt": (args.ffmpeg / "COPYING.LGPLv2.1").read_bytes()}
    for e in entries:
        text = e.pop("_text", None)
        if text:
            added["loadscope/" + e["licence_file"]] = Path(text).read_bytes()
    added["loadscope/THIRD-PARTY.md"] = markdown(entries, args.wheel.name).encode()
    added["loadscope/THIRD-PARTY.json"] = (json.dumps({"wheel": args.wheel.name, "libraries": entries}, indent=1)
                                           + "\n").encode()
    rewrite(args.wheel, added)
    projects = sorted({e["project"] for e in entries})
    print(f"wheel-notice: {len(entries)} libraries from {len(projects)} projects listed in loadscope/THIRD-PARTY.md")


if __name__ == "__main__":
    main()
