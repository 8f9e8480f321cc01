#!/bin/sh
# The polling Redis lock as a shell helper, the baseline of `cargo bench --bench contention` (its
# "seed style" column): take the lock with SET NX PX through redis-cli, retry every 200 ms, run the
# command, then release it with a Lua compare-and-delete (never someone else's lock). It is the
# recipe of the Java (Jedis) article on Redis locks this project grew from, with the fixed retry
# interval that article measured best among the strategies it tried.
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
