#!/bin/sh
# The seed article's Redis lock as a shell helper, the baseline of `cargo bench --bench contention`:
# take the lock with SET NX PX through redis-cli, retry every 200 ms, run the command, then release
# it with a Lua compare-and-delete (never someone else's lock).
#
# Usage: seed-lock.sh PORT KEY TTL_MS CMD [ARG]...   (Redis on 127.0.0.1:PORT; exits with CMD's status)
port=$1 key=$2 ttl=$3
shift 3
read -r token < /proc/sys/kernel/random/uuid
until [ "$(redis-cli -p "$port" SET "$key" "$token" NX PX "$ttl")" = OK ]; do
  sleep 0.2
done
"$@"
status=$?
redis-cli -p "$port" EVAL \
  "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end" \
  1 "$key" "$token" > /dev/null
exit "$status"
