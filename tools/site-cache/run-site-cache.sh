#!/usr/bin/env bash
# Runs the site cache (wheelhouse-site-cache.conf.template) as a private nginx, for tests and
# for trying it out: run-site-cache.sh start PORT HUB_URL DIR [MAX_SIZE] | stop DIR
# (A production site cache uses the system's nginx: see README.md here.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: run-site-cache.sh start PORT HUB_URL DIR [MAX_SIZE] | stop DIR}
case $cmd in
  start)
    port=${2:?port}; hub=${3:?hub url}; dir=${4:?dir}; max=${5:-10g}
    mkdir -p "$dir/cache" "$dir/logs" "$dir/tmp"
    resolver=$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf 2>/dev/null || true)
    sed -e "s|@HUB@|$hub|g" -e "s|@PORT@|127.0.0.1:$port|g" -e "s|@CACHE_DIR@|$dir/cache|g" \
        -e "s|@MAX_SIZE@|$max|g" -e "s|@RESOLVER@|${resolver:-127.0.0.1}|g" \
        "$here/wheelhouse-site-cache.conf.template" >"$dir/site-cache.conf"
    # Workers run as the caller (not www-data), so the cache may live in a private folder.
    user_line=""
    [[ $(id -u) -eq 0 ]] && user_line="user $(id -un) $(id -gn);"
    cat >"$dir/nginx.conf" <<CONF
$user_line
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log $dir/logs/access.log;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  include $dir/site-cache.conf;
}
CONF
    nginx -p "$dir" -c "$dir/nginx.conf" -t -q
    nginx -p "$dir" -c "$dir/nginx.conf"
    ;;
  stop)
    dir=${2:?dir}
    [[ -f $dir/nginx.pid ]] && nginx -p "$dir" -c "$dir/nginx.conf" -s stop || true
    ;;
  *)
    echo "usage: run-site-cache.sh start PORT HUB_URL DIR [MAX_SIZE] | stop DIR" >&2
    exit 2
    ;;
esac
