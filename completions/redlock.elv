
use builtin;
use str;

set edit:completion:arg-completer[redlock] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'redlock'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'redlock'= {
            cand -u 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --url 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --password-file 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD'
            cand --tls-ca 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)'
            cand --tls-cert 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)'
            cand --tls-key 'PEM file with the private key of --tls-cert'
            cand --sentinel 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command'
            cand --prefix 'Namespace for every Redis key redlock uses'
            cand --meta-ttl 'Keep a lock''s record (fence counter, last holder) for DUR after its last use'
            cand --log-max 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none'
            cand --connect-timeout 'Give up connecting to Redis after DUR'
            cand --io-timeout 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl'
            cand --cluster 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)'
            cand -q 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand --quiet 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand -v 'Log every Redis round trip to stderr'
            cand --verbose 'Log every Redis round trip to stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand acquire 'Take a lock and print its token (the lock stays held after redlock exits)'
            cand release 'Release a lock held with TOKEN (never someone else''s)'
            cand extend 'Reset the TTL of a lock held with TOKEN (an expired lock is never brought back)'
            cand status 'Show who holds locks: the named KEYs, or every lock under the prefix'
            cand log 'Show a lock''s history: who took it, when, how long they waited and held it, how it ended'
            cand exec 'Take a lock, run a command while renewing it, release it when the command exits'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'redlock;acquire'= {
            cand --ttl 'Lock lifetime: the lock frees itself this long after it was taken, renewed (exec, every TTL/3) or extended (`redlock extend`)'
            cand -w 'Wait at most DUR for a busy lock (default: until it is free; waiters go first come, first served); after a second, stderr says who holds it and your place in line'
            cand --wait 'Wait at most DUR for a busy lock (default: until it is free; waiters go first come, first served); after a second, stderr says who holds it and your place in line'
            cand -E 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed'
            cand --conflict-exit-code 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed'
            cand --note 'Describe the holder in ''redlock status'' (default: the command line); secrets show as ***'
            cand --wait-replicas 'After acquiring, wait (up to --io-timeout) until N replicas have the lock, or fail'
            cand --format 'What to print on stdout'
            cand -u 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --url 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --password-file 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD'
            cand --tls-ca 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)'
            cand --tls-cert 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)'
            cand --tls-key 'PEM file with the private key of --tls-cert'
            cand --sentinel 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command'
            cand --prefix 'Namespace for every Redis key redlock uses'
            cand --meta-ttl 'Keep a lock''s record (fence counter, last holder) for DUR after its last use'
            cand --log-max 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none'
            cand --connect-timeout 'Give up connecting to Redis after DUR'
            cand --io-timeout 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl'
            cand -n 'Do not wait: fail at once if the lock is busy'
            cand --no-wait 'Do not wait: fail at once if the lock is busy'
            cand --allow-eviction 'Lock even on a server that may evict it: maxmemory-policy allkeys-* (refused without this)'
            cand --cluster 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)'
            cand -q 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand --quiet 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand -v 'Log every Redis round trip to stderr'
            cand --verbose 'Log every Redis round trip to stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'redlock;release'= {
            cand --if-fence 'With --force: release only if the lock is still held with fence N, as `status` shows it (exit 3 otherwise)'
            cand --if-token 'With --force: release only if the holder''s token starts with FINGERPRINT, the 8 hex digits `status` shows, or more of the token (exit 3 otherwise)'
            cand -u 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --url 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --password-file 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD'
            cand --tls-ca 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)'
            cand --tls-cert 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)'
            cand --tls-key 'PEM file with the private key of --tls-cert'
            cand --sentinel 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command'
            cand --prefix 'Namespace for every Redis key redlock uses'
            cand --meta-ttl 'Keep a lock''s record (fence counter, last holder) for DUR after its last use'
            cand --log-max 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none'
            cand --connect-timeout 'Give up connecting to Redis after DUR'
            cand --io-timeout 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl'
            cand --force 'Delete the lock whoever holds it, and print the previous holder'
            cand --cluster 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)'
            cand -q 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand --quiet 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand -v 'Log every Redis round trip to stderr'
            cand --verbose 'Log every Redis round trip to stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'redlock;extend'= {
            cand --ttl 'New lifetime, counted from now'
            cand -u 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --url 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --password-file 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD'
            cand --tls-ca 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)'
            cand --tls-cert 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)'
            cand --tls-key 'PEM file with the private key of --tls-cert'
            cand --sentinel 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command'
            cand --prefix 'Namespace for every Redis key redlock uses'
            cand --meta-ttl 'Keep a lock''s record (fence counter, last holder) for DUR after its last use'
            cand --log-max 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none'
            cand --connect-timeout 'Give up connecting to Redis after DUR'
            cand --io-timeout 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl'
            cand --cluster 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)'
            cand -q 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand --quiet 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand -v 'Log every Redis round trip to stderr'
            cand --verbose 'Log every Redis round trip to stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'redlock;status'= {
            cand --format 'What to print: a table for people, JSON, or metrics in the Prometheus text format (exit 0 whether the locks are held or free)'
            cand -u 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --url 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --password-file 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD'
            cand --tls-ca 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)'
            cand --tls-cert 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)'
            cand --tls-key 'PEM file with the private key of --tls-cert'
            cand --sentinel 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command'
            cand --prefix 'Namespace for every Redis key redlock uses'
            cand --meta-ttl 'Keep a lock''s record (fence counter, last holder) for DUR after its last use'
            cand --log-max 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none'
            cand --connect-timeout 'Give up connecting to Redis after DUR'
            cand --io-timeout 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl'
            cand --json 'Print JSON instead of a table: short for --format json'
            cand --show-token 'Show whole tokens instead of fingerprints'
            cand --queue 'List the waiters of every lock too (named locks always list theirs, in queue order, below the table: who, what, for how long, until when; JSON always has them, under "queue")'
            cand --watch 'Keep watching until Ctrl-C: on a terminal, redraw the table on every change and each second; with --json, print one JSON object per change (JSON Lines); otherwise, one line per change'
            cand --cluster 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)'
            cand -q 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand --quiet 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand -v 'Log every Redis round trip to stderr'
            cand --verbose 'Log every Redis round trip to stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'redlock;log'= {
            cand --since 'Only events of the last DUR (by the server''s clock)'
            cand --limit 'At most the N most recent events (all that are kept, up to --log-max, by default)'
            cand -u 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --url 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --password-file 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD'
            cand --tls-ca 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)'
            cand --tls-cert 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)'
            cand --tls-key 'PEM file with the private key of --tls-cert'
            cand --sentinel 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command'
            cand --prefix 'Namespace for every Redis key redlock uses'
            cand --meta-ttl 'Keep a lock''s record (fence counter, last holder) for DUR after its last use'
            cand --log-max 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none'
            cand --connect-timeout 'Give up connecting to Redis after DUR'
            cand --io-timeout 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl'
            cand -f 'Then keep printing events as they are written, until interrupted (exit 130 on Ctrl-C)'
            cand --follow 'Then keep printing events as they are written, until interrupted (exit 130 on Ctrl-C)'
            cand --json 'One JSON object per event and line (JSON Lines) instead of text'
            cand --cluster 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)'
            cand -q 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand --quiet 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand -v 'Log every Redis round trip to stderr'
            cand --verbose 'Log every Redis round trip to stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'redlock;exec'= {
            cand --ttl 'Lock lifetime: the lock frees itself this long after it was taken, renewed (exec, every TTL/3) or extended (`redlock extend`)'
            cand -w 'Wait at most DUR for a busy lock (default: until it is free; waiters go first come, first served); after a second, stderr says who holds it and your place in line'
            cand --wait 'Wait at most DUR for a busy lock (default: until it is free; waiters go first come, first served); after a second, stderr says who holds it and your place in line'
            cand -E 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed'
            cand --conflict-exit-code 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed'
            cand --note 'Describe the holder in ''redlock status'' (default: the command line); secrets show as ***'
            cand --wait-replicas 'After acquiring, wait (up to --io-timeout) until N replicas have the lock, or fail'
            cand --on-lost 'What to do with the command if the lock is lost while it runs'
            cand --kill-after 'After a SIGTERM or SIGINT (forwarded, or SIGTERM on lock loss), send SIGKILL if the command still runs after DUR'
            cand --report 'When exec ends, append one JSON line about the run to FILE (- for stdout)'
            cand -c 'Run this shell command with /bin/sh -c instead of CMD'
            cand --command 'Run this shell command with /bin/sh -c instead of CMD'
            cand -u 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --url 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum'
            cand --password-file 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD'
            cand --tls-ca 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)'
            cand --tls-cert 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)'
            cand --tls-key 'PEM file with the private key of --tls-cert'
            cand --sentinel 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command'
            cand --prefix 'Namespace for every Redis key redlock uses'
            cand --meta-ttl 'Keep a lock''s record (fence counter, last holder) for DUR after its last use'
            cand --log-max 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none'
            cand --connect-timeout 'Give up connecting to Redis after DUR'
            cand --io-timeout 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl'
            cand -n 'Do not wait: fail at once if the lock is busy'
            cand --no-wait 'Do not wait: fail at once if the lock is busy'
            cand --allow-eviction 'Lock even on a server that may evict it: maxmemory-policy allkeys-* (refused without this)'
            cand --cluster 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)'
            cand -q 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand --quiet 'Print nothing on stderr except errors (and whom `release --force` evicted)'
            cand -v 'Log every Redis round trip to stderr'
            cand --verbose 'Log every Redis round trip to stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'redlock;help'= {
            cand acquire 'Take a lock and print its token (the lock stays held after redlock exits)'
            cand release 'Release a lock held with TOKEN (never someone else''s)'
            cand extend 'Reset the TTL of a lock held with TOKEN (an expired lock is never brought back)'
            cand status 'Show who holds locks: the named KEYs, or every lock under the prefix'
            cand log 'Show a lock''s history: who took it, when, how long they waited and held it, how it ended'
            cand exec 'Take a lock, run a command while renewing it, release it when the command exits'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'redlock;help;acquire'= {
        }
        &'redlock;help;release'= {
        }
        &'redlock;help;extend'= {
        }
        &'redlock;help;status'= {
        }
        &'redlock;help;log'= {
        }
        &'redlock;help;exec'= {
        }
        &'redlock;help;help'= {
        }
    ]
    $completions[$command]
}
