#!/usr/bin/env bash
# A real HTTP(S) server for tests: nginx serving ROOT on 127.0.0.1, everything (conf, pid file,
# logs, temp files, a throwaway CA) under DIR. Tests in `make test` run `start DIR ROOT`,
# source DIR/env, and `stop DIR` (kills by pid file) when done.
#   scripts/http-server.sh start DIR ROOT  # prints (and writes to DIR/env) LOADSCOPE_HTTP* lines
#   scripts/http-server.sh stop DIR        # idempotent
#   scripts/http-server.sh env DIR
# Both ports serve ROOT four ways: /x plain (Range, ETag, multipart byteranges as nginx does),
# /throttled/x rate-limited (20 r/s, burst 5, then 503s: for retry tests; all requests come from
# 127.0.0.1, so the limit is shared by every client), /slow/x at 2 MiB/s per connection. nginx
# lets the first second's worth through at once: a response of up to 2 MiB is not slowed at all.
# /flaky/x answers one request in ten (at random, by request id) with a 503.
set -euo pipefail
NGINX=${NGINX:-/usr/sbin/nginx}
TIMEOUT=${LOADSCOPE_SERVER_TIMEOUT:-90}  # seconds

die() { echo "http-server: $*" >&2; exit 1; }

# Only a pid whose command line names DIR: a stale pid file must not kill a recycled pid.
ours() { [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") == *"$D/"* ]]; }
live_pid() { local p; [ -f "$D/nginx.pid" ] && p=$(cat "$D/nginx.pid") && ours "$p" && echo "$p"; true; }
# An exited master stays a zombie until init reaps it: count it as gone.
running() { [ -e "/proc/$1" ] && ! grep -qs '^State:.*Z' "/proc/$1/status"; }

stop() {
  local p i
  p=$(live_pid)
  [ -n "$p" ] || return 0
  kill -TERM "$p" 2>/dev/null || true  # the master stops its workers before it exits
  for i in $(seq 100); do running "$p" || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  while running "$p"; do sleep 0.1; done
}

quiet() { local out; out=$("$@" 2>&1) || { echo "$out" >&2; return 1; }; }  # openssl chatters on stderr

make_certs() {  # a CA, and a certificate for 127.0.0.1 and localhost signed by it
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  quiet openssl req -x509 "${ec[@]}" -days 30 -subj "/CN=loadscope test CA" -keyout "$D/ca.key" -out "$D/ca.pem"
  quiet openssl req "${ec[@]}" -subj "/CN=127.0.0.1" -keyout "$D/server.key" -out "$D/server.csr"
  quiet openssl x509 -req -in "$D/server.csr" -CA "$D/ca.pem" -CAkey "$D/ca.key" -days 30 -out "$D/server.pem" \
    -set_serial "0x$(openssl rand -hex 8)" -extfile <(printf '%s\n' 'basicConstraints = CA:FALSE' \
    'subjectAltName = IP:127.0.0.1, DNS:localhost' 'extendedKeyUsage = serverAuth')
}

start() {
  local root=$1 http https i
  [ -d "$root" ] || die "no directory $root"
  root=$(cd "$root" && pwd)
  [ -z "$(live_pid)" ] || die "nginx already running under $D (stop it first)"
  rm -rf "$D"/{nginx.conf,tmp,env,error.log,access.log}
  mkdir -p "$D/tmp"
  make_certs
  read -r http https < <(python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
  # Workers would otherwise drop to `nobody` and might not read ROOT.
  [ "$(id -u)" != 0 ] || echo 'user root;' >"$D/nginx.conf"
  cat >>"$D/nginx.conf" <<EOF
daemon on;
worker_processes 1;
pid "$D/nginx.pid";
error_log "$D/error.log" warn;
events { worker_connections 512; }
http {
  access_log "$D/access.log";
  client_body_temp_path "$D/tmp/body";
  proxy_temp_path "$D/tmp/proxy";
  fastcgi_temp_path "$D/tmp/fastcgi";
  uwsgi_temp_path "$D/tmp/uwsgi";
  scgi_temp_path "$D/tmp/scgi";
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  limit_req_zone \$binary_remote_addr zone=throttled:1m rate=20r/s;
  limit_req_status 503;
  split_clients "\${request_id}" \$flaky { 10% 1; * 0; }  # /flaky/: one request in ten at random
  server {
    listen 127.0.0.1:$http;
    listen 127.0.0.1:$https ssl;
    ssl_certificate "$D/server.pem";
    ssl_certificate_key "$D/server.key";
    root "$root";
    location / { }
    location = /.ready { access_log off; return 204; }  # for start's probe, which logs no error
    location /throttled/ { alias "$root/"; limit_req zone=throttled burst=5 nodelay; }
    location /slow/ { alias "$root/"; limit_rate 2m; }
    location /flaky/ { alias "$root/"; if (\$flaky) { return 503; } }
  }
}
EOF
  "$NGINX" -p "$D" -c "$D/nginx.conf" -e "$D/error.log" </dev/null || die "nginx did not start (see $D/error.log)"
  for ((i = 0; ; i++)); do
    curl -so /dev/null --max-time 5 "http://127.0.0.1:$http/.ready" &&
      curl -so /dev/null --max-time 5 --cacert "$D/ca.pem" "https://127.0.0.1:$https/.ready" && break
    [ $i -lt $((TIMEOUT * 5)) ] || { tail -20 "$D/error.log" >&2 2>/dev/null || true; stop; die "nginx not answering after ${TIMEOUT}s"; }
    sleep 0.2
  done
  printf 'export %s=%q\n' LOADSCOPE_HTTP_URL "http://127.0.0.1:$http" LOADSCOPE_HTTPS_URL "https://127.0.0.1:$https" \
    LOADSCOPE_HTTP_CA "$D/ca.pem" >"$D/env"
  cat "$D/env"
}

usage="usage: $0 start DIR ROOT | stop DIR | env DIR"
[ $# -ge 2 ] || die "$usage"
[ "$1" != start ] || mkdir -p "$2"
[ -d "$2" ] || { [ "$1" = stop ] && exit 0; die "no directory $2"; }
D=$(cd "$2" && pwd)
case $1:$# in
  start:3) start "$3" ;;
  stop:2) stop ;;
  env:2) cat "$D/env" ;;
  *) die "$usage" ;;
esac
