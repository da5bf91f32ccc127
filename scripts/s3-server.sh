#!/usr/bin/env bash
# A real S3 server for tests: a single-node Ceph (monitor + one in-memory OSD + radosgw) on
# 127.0.0.1, everything (conf, data, logs, pid files, admin sockets) under DIR. Tests in
# `make test` run `start DIR`, source DIR/env, and `stop DIR` (kills by pid file) when done.
#   scripts/s3-server.sh start DIR   # prints (and writes to DIR/env) AWS_* export lines
#   scripts/s3-server.sh stop DIR    # idempotent
#   scripts/s3-server.sh restart-rgw DIR  # radosgw killed (SIGKILL) and started again, same port
#   scripts/s3-server.sh env DIR
# The Debian packages are downloaded and unpacked with `dpkg -x` (their install scripts want
# systemd and a ceph user) into ${LOADSCOPE_SERVER_CACHE:-.servers}; later starts reuse it.
set -euo pipefail
CACHE=${LOADSCOPE_SERVER_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.servers}
R=$CACHE/root
ACCESS=${LOADSCOPE_S3_ACCESS_KEY:-loadscope-test}
SECRET=${LOADSCOPE_S3_SECRET_KEY:-loadscope-secret-DO-NOT-LEAK}
TIMEOUT=${LOADSCOPE_SERVER_TIMEOUT:-90}  # seconds, for each wait

die() { echo "s3-server: $*" >&2; exit 1; }

fetch() {
  [ -f "$CACHE/root.done" ] && return
  mkdir -p "$CACHE/debs/partial"
  (  # in a subshell, so that the daemons started later do not inherit the lock
    flock -w 600 9 || die "$CACHE is locked by another unpack"
    [ -f "$CACHE/root.done" ] && exit 0  # two tests starting at once: the other one unpacked it
    local get=(apt-get install --download-only -y -q --no-install-recommends
      -o Dir::Cache::archives="$CACHE/debs" radosgw ceph-mon ceph-osd ceph-common)
    "${get[@]}" >"$CACHE/apt.log" 2>&1 || { apt-get update -q && "${get[@]}"; } >>"$CACHE/apt.log" 2>&1 ||
      { tail -20 "$CACHE/apt.log" >&2; die "could not download the ceph packages (log: $CACHE/apt.log)"; }
    rm -rf "$R"
    for d in "$CACHE"/debs/*.deb; do dpkg -x "$d" "$R"; done
    touch "$CACHE/root.done"  # only now: an interrupted unpack is redone next time
  ) 9>"$CACHE/.lock"
}

# Only pids whose command line names DIR: a stale pid file must not kill a recycled pid.
ours() { [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") == *"$D/"* ]]; }
live_pids() {  # live_pids PIDFILE...
  local f p
  for f in "$@"; do [ -f "$f" ] && p=$(cat "$f") && ours "$p" && echo "$p"; done; true
}
# A daemon that has exited stays a zombie until init reaps it: count it as gone.
running() { local p; for p in "$@"; do [ -e "/proc/$p" ] && ! grep -qs '^State:.*Z' "/proc/$p/status" && return 0; done; return 1; }

kill_wait() {  # SIGTERM, up to 10 s, then SIGKILL
  local i
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  for i in $(seq 100); do running "$@" || return 0; sleep 0.1; done
  kill -KILL "$@" 2>/dev/null || true
  while running "$@"; do sleep 0.1; done
}

stop() {
  # In this order: radosgw hangs on exit once the OSD is gone, and an OSD whose monitor is
  # gone waits 5 s for it.
  kill_wait $(live_pids "$D"/run/client.*.pid)
  kill_wait $(live_pids "$D"/run/osd.*.pid)
  kill_wait $(live_pids "$D"/run/mon.*.pid)
  rm -f "$D"/run/*.pid
}

fail() {  # fail MESSAGE LOG: report, show why, and leave nothing running
  echo "s3-server: $1; last lines of $2:" >&2
  tail -25 "$2" >&2 2>/dev/null || true
  stop; exit 1
}

wait_for() {  # wait_for WHAT LOG COMMAND...
  local what=$1 log=$2 end=$((SECONDS + TIMEOUT)); shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "no $what after ${TIMEOUT}s" "$log"
    sleep 0.3
  done
}

# A `ceph` command, tried up to 3 times. The CLI first asks a monitor for its command list;
# once in a CI run, with a second cluster starting beside this one, the fresh monitor refused
# that request because it carried fsid 0 (mon log: "handle_command on fsid 0000... != ...";
# CLI: "Error EPERM: problem getting command descriptions from mon."), so the command itself
# was never sent. `osd new` with the same uuid and `osd crush add` of the same item are
# idempotent besides, so trying again is safe.
ceph_retry() {
  local try
  for try in 1 2 3; do
    "$@" && return 0
    [ $try = 3 ] || sleep 1
  done
  return 1
}

osd_up() { [[ $(timeout 10 ceph -c "$D/ceph.conf" osd stat) == *" 1 up"* ]]; }

s3_ok() {  # a signed ListBuckets: proves radosgw, its pools and the user all work
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --aws-sigv4 aws:amz:us-east-1:s3 \
    --user "$ACCESS:$SECRET" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "http://127.0.0.1:$RGW_PORT/")" = 200 ]
}

use_packages() {  # the unpacked ceph packages on PATH and the library path
  export PATH=$R/usr/bin:$PATH PYTHONPATH=$R/usr/lib/python3/dist-packages${PYTHONPATH:+:$PYTHONPATH}
  export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:$R/usr/lib/x86_64-linux-gnu/ceph:$R/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# Kills radosgw as a crash would (SIGKILL) and starts it again on its port: the tests' "server
# restarted mid-epoch". The data lives in the OSD, which keeps running.
restart_rgw() {
  use_packages
  local p
  p=$(live_pids "$D"/run/client.*.pid)
  if [ -n "$p" ]; then
    kill -KILL $p 2>/dev/null || true
    while running $p; do sleep 0.1; done
  fi
  RGW_PORT=$(sed -n 's|.*AWS_ENDPOINT_URL=http://127.0.0.1:\([0-9]*\).*|\1|p' "$D/env")
  [ -n "$RGW_PORT" ] || die "no endpoint in $D/env (not started?)"
  local rlog=$D/log/client.rgw.test.log
  radosgw -c "$D/ceph.conf" -n client.rgw.test >>"$rlog" 2>&1 || fail "radosgw failed to restart" "$rlog"
  wait_for "signed S3 answer after the restart" "$rlog" s3_ok
}

start() {
  [ -z "$(live_pids "$D"/run/*.pid)" ] || die "daemons already running under $D (stop it first)"
  fetch
  use_packages
  rm -rf "$D"/{ceph.conf,monmap,mon,osd,rgw,run,log,env}
  mkdir -p "$D"/{mon,osd,rgw,run,log}
  local fsid uuid id
  fsid=$(cat /proc/sys/kernel/random/uuid)
  read -r MON_PORT RGW_PORT < <(python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
  local lib=$R/usr/lib/x86_64-linux-gnu
  cat >"$D/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$MON_PORT
public addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
keyring = $D/keyring
run dir = $D/run
pid file = $D/run/\$name.pid
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
mon cluster log file = $D/log/cluster.log
log to stderr = false
err to stderr = false
debug ms = 0/0
debug mon = 0/0
debug paxos = 0/0
debug osd = 0/0
debug memstore = 0/0
debug rgw = 0/0
debug monc = 0/0
debug auth = 0/0
debug rocksdb = 0/0
crash dir = $D/crash
plugin dir = $lib/ceph
erasure code dir = $lib/ceph/erasure-code
osd class dir = $lib/rados-classes
# a test machine's disk may be nearly full; the monitor would refuse to run
mon data avail crit = 1
mon data avail warn = 2
mon data = $D/mon/\$id
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
# proposals are batched for 1 s by default; radosgw creates its pools one proposal at a time
paxos propose interval = 0.05
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0

[osd]
osd data = $D/osd/\$id
osd journal = $D/osd/\$id/journal
osd objectstore = memstore
memstore device bytes = 1073741824
# without these two the OSD stops at boot ("wrong fsid")
osd crush update on start = false
osd class update on start = false
osd max object name len = 460
osd max object namespace len = 64

[client.rgw.test]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1
rgw data = $D/rgw
rgw dns name = localhost
EOF
  local C=(-c "$D/ceph.conf") mlog=$D/log/mon.a.log olog
  monmaptool --create --addv a "[v1:127.0.0.1:$MON_PORT]" --fsid "$fsid" "$D/monmap" >/dev/null
  ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" >>"$mlog" 2>&1 || fail "ceph-mon --mkfs failed" "$mlog"
  ceph-mon "${C[@]}" -i a >>"$mlog" 2>&1 || fail "ceph-mon failed" "$mlog"
  uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(ceph_retry timeout 60 ceph "${C[@]}" --connect-timeout 60 osd new "$uuid" 2>>"$mlog") ||
    fail "ceph osd new failed" "$mlog"
  olog=$D/log/osd.$id.log
  mkdir -p "$D/osd/$id"
  ceph-osd "${C[@]}" -i "$id" --mkfs --osd-uuid "$uuid" >>"$olog" 2>&1 || fail "ceph-osd --mkfs failed" "$olog"
  ceph_retry timeout 30 ceph "${C[@]}" osd crush add "osd.$id" 1.0 root=default host=localhost >/dev/null 2>>"$mlog" ||
    fail "ceph osd crush add failed" "$mlog"
  ceph-osd "${C[@]}" -i "$id" >>"$olog" 2>&1 || fail "ceph-osd failed" "$olog"
  wait_for "OSD up" "$olog" osd_up
  local rlog=$D/log/client.rgw.test.log
  radosgw "${C[@]}" -n client.rgw.test >>"$rlog" 2>&1 || fail "radosgw failed" "$rlog"
  wait_for "radosgw on port $RGW_PORT" "$rlog" curl -sf --max-time 5 "http://127.0.0.1:$RGW_PORT/"
  timeout 60 radosgw-admin "${C[@]}" user create --uid=loadscope --display-name=loadscope \
    --access-key="$ACCESS" --secret-key="$SECRET" >/dev/null 2>>"$rlog" || fail "radosgw-admin user create failed" "$rlog"
  wait_for "signed S3 answer" "$rlog" s3_ok
  printf 'export %s=%q\n' AWS_ENDPOINT_URL "http://127.0.0.1:$RGW_PORT" AWS_ACCESS_KEY_ID "$ACCESS" \
    AWS_SECRET_ACCESS_KEY "$SECRET" AWS_REGION us-east-1 >"$D/env"
  cat "$D/env"
}

[ $# -eq 2 ] || die "usage: $0 start|stop|restart-rgw|env DIR"
[ "$1" != start ] || mkdir -p "$2"
[ -d "$2" ] || { [ "$1" = stop ] && exit 0; die "no directory $2"; }
D=$(cd "$2" && pwd)
case $1 in
  start) start ;;
  stop) stop ;;
  restart-rgw) restart_rgw ;;
  env) cat "$D/env" ;;
  *) die "usage: $0 start|stop|restart-rgw|env DIR" ;;
esac
