# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_redlock_global_optspecs
    string join \n u/url= password-file= tls-ca= tls-cert= tls-key= cluster sentinel= prefix= meta-ttl= log-max= connect-timeout= io-timeout= q/quiet v/verbose h/help V/version
end

function __fish_redlock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_redlock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_redlock_using_subcommand
    set -l cmd (__fish_redlock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c redlock -n "__fish_redlock_needs_command" -s u -l url -d 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum' -r
complete -c redlock -n "__fish_redlock_needs_command" -l password-file -d 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD' -r -F
complete -c redlock -n "__fish_redlock_needs_command" -l tls-ca -d 'PEM file with the CA certificate(s) that signed the server\'s certificate (rediss://)' -r -F
complete -c redlock -n "__fish_redlock_needs_command" -l tls-cert -d 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)' -r -F
complete -c redlock -n "__fish_redlock_needs_command" -l tls-key -d 'PEM file with the private key of --tls-cert' -r -F
complete -c redlock -n "__fish_redlock_needs_command" -l sentinel -d 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command' -r
complete -c redlock -n "__fish_redlock_needs_command" -l prefix -d 'Namespace for every Redis key redlock uses' -r
complete -c redlock -n "__fish_redlock_needs_command" -l meta-ttl -d 'Keep a lock\'s record (fence counter, last holder) for DUR after its last use' -r
complete -c redlock -n "__fish_redlock_needs_command" -l log-max -d 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none' -r
complete -c redlock -n "__fish_redlock_needs_command" -l connect-timeout -d 'Give up connecting to Redis after DUR' -r
complete -c redlock -n "__fish_redlock_needs_command" -l io-timeout -d 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server\'s reply, so keep it well under --ttl' -r
complete -c redlock -n "__fish_redlock_needs_command" -l cluster -d 'The URLs are seed nodes of a Redis Cluster (the lock\'s keys share one hash slot)'
complete -c redlock -n "__fish_redlock_needs_command" -s q -l quiet -d 'Print nothing on stderr except errors (and whom `release --force` evicted)'
complete -c redlock -n "__fish_redlock_needs_command" -s v -l verbose -d 'Log every Redis round trip to stderr'
complete -c redlock -n "__fish_redlock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_needs_command" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "exec" -d 'Take a lock, run a command while renewing it, release it when the command exits'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "acquire" -d 'Take a lock and print its token (the lock stays held after redlock exits)'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "release" -d 'Release a lock held with TOKEN (never someone else\'s)'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "extend" -d 'Reset the TTL of a lock held with TOKEN (an expired lock is never brought back)'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "status" -d 'Show who holds locks: the named KEYs, or every lock under the prefix'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "log" -d 'Show a lock\'s history: who took it, when, how long they waited and held it, how it ended'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "wait" -d 'Wait until a lock is free, without taking it or joining its queue'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l ttl -d 'Lock lifetime: it frees itself DUR after it was taken or renewed (exec renews every TTL/3)' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s w -l wait -d 'Wait at most DUR for a busy lock (default: until it is free; first come, first served)' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s E -l conflict-exit-code -d 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l note -d 'Describe the holder in \'redlock status\' (default: the command line); secrets show as ***' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l wait-replicas -d 'After acquiring, wait (up to --io-timeout) until N replicas have the lock, or fail' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l slots -d 'Let up to N holders in at once; exec\'s command gets its place in REDLOCK_SLOT (0 to N-1)' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l pool -d 'One holder per named resource; exec\'s command gets the one it holds in REDLOCK_RESOURCE' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l on-lost -d 'What to do with the command if the lock is lost while it runs' -r -f -a "term\t'SIGTERM, then SIGKILL after --kill-after'
kill\t'SIGKILL at once'
ignore\t'Warn and let the command finish'"
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l kill-after -d 'SIGKILL the command if it still runs DUR after a SIGTERM or SIGINT (passed on, or sent)' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l max-runtime -d 'Stop the command after it held the lock for DUR (SIGTERM, then SIGKILL) and exit 124' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l warn-after -d 'Warn (stderr, and the lock\'s history) once the command has held the lock for DUR' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l report -d 'When exec ends, append one JSON line about the run to FILE (- for stdout)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s c -l command -d 'Run this shell command with /bin/sh -c instead of CMD' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s u -l url -d 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l password-file -d 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l tls-ca -d 'PEM file with the CA certificate(s) that signed the server\'s certificate (rediss://)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l tls-cert -d 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l tls-key -d 'PEM file with the private key of --tls-cert' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l sentinel -d 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l prefix -d 'Namespace for every Redis key redlock uses' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l meta-ttl -d 'Keep a lock\'s record (fence counter, last holder) for DUR after its last use' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l log-max -d 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l connect-timeout -d 'Give up connecting to Redis after DUR' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l io-timeout -d 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server\'s reply, so keep it well under --ttl' -r
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s n -l no-wait -d 'Do not wait: fail at once if the lock is busy'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l allow-eviction -d 'Lock even on a server that may evict it: maxmemory-policy allkeys-* (refused without this)'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l shared -d 'Hold it shared: any number of --shared holders, or one without (a writer, who goes first)'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l supersede -d 'Make earlier --supersede waiters give up (exit -E); a later one makes this one give up'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l preempt -d 'Go ahead of the waiters without --preempt; stop a --preemptible holder (it exits 75)'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l preemptible -d 'Once held, a --preempt waiter may stop the command (acquire: needs --while-pid)'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -l cluster -d 'The URLs are seed nodes of a Redis Cluster (the lock\'s keys share one hash slot)'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s q -l quiet -d 'Print nothing on stderr except errors (and whom `release --force` evicted)'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s v -l verbose -d 'Log every Redis round trip to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand exec" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l ttl -d 'Lock lifetime: it frees itself DUR after it was taken or renewed (exec renews every TTL/3)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s w -l wait -d 'Wait at most DUR for a busy lock (default: until it is free; first come, first served)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s E -l conflict-exit-code -d 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l note -d 'Describe the holder in \'redlock status\' (default: the command line); secrets show as ***' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l wait-replicas -d 'After acquiring, wait (up to --io-timeout) until N replicas have the lock, or fail' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l slots -d 'Let up to N holders in at once; exec\'s command gets its place in REDLOCK_SLOT (0 to N-1)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l pool -d 'One holder per named resource; exec\'s command gets the one it holds in REDLOCK_RESOURCE' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l format -d 'What to print on stdout' -r -f -a "token\t'The token alone, for T=$(redlock acquire KEY)'
env\t'REDLOCK_KEY=, REDLOCK_TOKEN= and REDLOCK_FENCE= lines (and REDLOCK_SLOT=, REDLOCK_RESOURCE= with --slots or --pool), for v=$(...) || exit; eval "$v"'
json\t'One JSON object'"
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l while-pid -d 'Keep the lock (renewed every TTL/3) while PID and the work it started run' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l on-lost -d 'With --while-pid: what the keeper does to PID and its work if the lock is lost or preempted' -r -f -a "term\t'Send SIGTERM to PID and its work (SIGKILL after --kill-after), so nothing runs unprotected'
kill\t'Send SIGKILL to PID and its work'
ignore\t'Only warn (on the keeper\'s stderr, and in the lock\'s history); SIGTERM releases at once'"
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l kill-after -d 'With --while-pid: SIGKILL PID\'s work if it still runs DUR after the keeper\'s SIGTERM' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s u -l url -d 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l password-file -d 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l tls-ca -d 'PEM file with the CA certificate(s) that signed the server\'s certificate (rediss://)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l tls-cert -d 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l tls-key -d 'PEM file with the private key of --tls-cert' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l sentinel -d 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l prefix -d 'Namespace for every Redis key redlock uses' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l meta-ttl -d 'Keep a lock\'s record (fence counter, last holder) for DUR after its last use' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l log-max -d 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l connect-timeout -d 'Give up connecting to Redis after DUR' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l io-timeout -d 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server\'s reply, so keep it well under --ttl' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s n -l no-wait -d 'Do not wait: fail at once if the lock is busy'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l allow-eviction -d 'Lock even on a server that may evict it: maxmemory-policy allkeys-* (refused without this)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l shared -d 'Hold it shared: any number of --shared holders, or one without (a writer, who goes first)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l supersede -d 'Make earlier --supersede waiters give up (exit -E); a later one makes this one give up'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l preempt -d 'Go ahead of the waiters without --preempt; stop a --preemptible holder (it exits 75)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l preemptible -d 'Once held, a --preempt waiter may stop the command (acquire: needs --while-pid)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l cluster -d 'The URLs are seed nodes of a Redis Cluster (the lock\'s keys share one hash slot)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s q -l quiet -d 'Print nothing on stderr except errors (and whom `release --force` evicted)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s v -l verbose -d 'Log every Redis round trip to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_using_subcommand release" -l if-fence -d 'With --force: release only if the lock is still held with fence N, as `status` shows it (exit 3 otherwise)' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l if-token -d 'With --force: release only if the holder\'s token starts with FINGERPRINT, the 8 hex digits `status` shows, or more of the token (exit 3 otherwise)' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -s u -l url -d 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l password-file -d 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand release" -l tls-ca -d 'PEM file with the CA certificate(s) that signed the server\'s certificate (rediss://)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand release" -l tls-cert -d 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand release" -l tls-key -d 'PEM file with the private key of --tls-cert' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand release" -l sentinel -d 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l prefix -d 'Namespace for every Redis key redlock uses' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l meta-ttl -d 'Keep a lock\'s record (fence counter, last holder) for DUR after its last use' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l log-max -d 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l connect-timeout -d 'Give up connecting to Redis after DUR' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l io-timeout -d 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server\'s reply, so keep it well under --ttl' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l force -d 'Delete the lock whoever holds it, and print the previous holder'
complete -c redlock -n "__fish_redlock_using_subcommand release" -l cluster -d 'The URLs are seed nodes of a Redis Cluster (the lock\'s keys share one hash slot)'
complete -c redlock -n "__fish_redlock_using_subcommand release" -s q -l quiet -d 'Print nothing on stderr except errors (and whom `release --force` evicted)'
complete -c redlock -n "__fish_redlock_using_subcommand release" -s v -l verbose -d 'Log every Redis round trip to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand release" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l ttl -d 'New lifetime, counted from now' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s u -l url -d 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l password-file -d 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l tls-ca -d 'PEM file with the CA certificate(s) that signed the server\'s certificate (rediss://)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l tls-cert -d 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l tls-key -d 'PEM file with the private key of --tls-cert' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l sentinel -d 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l prefix -d 'Namespace for every Redis key redlock uses' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l meta-ttl -d 'Keep a lock\'s record (fence counter, last holder) for DUR after its last use' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l log-max -d 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l connect-timeout -d 'Give up connecting to Redis after DUR' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l io-timeout -d 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server\'s reply, so keep it well under --ttl' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l cluster -d 'The URLs are seed nodes of a Redis Cluster (the lock\'s keys share one hash slot)'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s q -l quiet -d 'Print nothing on stderr except errors (and whom `release --force` evicted)'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s v -l verbose -d 'Log every Redis round trip to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_using_subcommand status" -l format -d 'What to print: a table for people, JSON, or metrics in the Prometheus text format (exit 0 whether the locks are held or free)' -r -f -a "table\t'A table (and below it, the waiters and a quorum\'s nodes)'
json\t'One JSON array, an object per lock'
prometheus\t'The Prometheus text format (0.0.4), for node_exporter\'s textfile collector'"
complete -c redlock -n "__fish_redlock_using_subcommand status" -s u -l url -d 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum' -r
complete -c redlock -n "__fish_redlock_using_subcommand status" -l password-file -d 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand status" -l tls-ca -d 'PEM file with the CA certificate(s) that signed the server\'s certificate (rediss://)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand status" -l tls-cert -d 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand status" -l tls-key -d 'PEM file with the private key of --tls-cert' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand status" -l sentinel -d 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command' -r
complete -c redlock -n "__fish_redlock_using_subcommand status" -l prefix -d 'Namespace for every Redis key redlock uses' -r
complete -c redlock -n "__fish_redlock_using_subcommand status" -l meta-ttl -d 'Keep a lock\'s record (fence counter, last holder) for DUR after its last use' -r
complete -c redlock -n "__fish_redlock_using_subcommand status" -l log-max -d 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none' -r
complete -c redlock -n "__fish_redlock_using_subcommand status" -l connect-timeout -d 'Give up connecting to Redis after DUR' -r
complete -c redlock -n "__fish_redlock_using_subcommand status" -l io-timeout -d 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server\'s reply, so keep it well under --ttl' -r
complete -c redlock -n "__fish_redlock_using_subcommand status" -l json -d 'Print JSON instead of a table: short for --format json'
complete -c redlock -n "__fish_redlock_using_subcommand status" -l show-token -d 'Show whole tokens instead of fingerprints'
complete -c redlock -n "__fish_redlock_using_subcommand status" -l queue -d 'List the waiters of every lock too (named locks always list theirs, in queue order, below the table: who, what, for how long, until when; JSON always has them, under "queue")'
complete -c redlock -n "__fish_redlock_using_subcommand status" -l watch -d 'Keep watching until Ctrl-C: on a terminal, redraw the table on every change and each second; with --json, print one JSON object per change (JSON Lines); otherwise, one line per change'
complete -c redlock -n "__fish_redlock_using_subcommand status" -l cluster -d 'The URLs are seed nodes of a Redis Cluster (the lock\'s keys share one hash slot)'
complete -c redlock -n "__fish_redlock_using_subcommand status" -s q -l quiet -d 'Print nothing on stderr except errors (and whom `release --force` evicted)'
complete -c redlock -n "__fish_redlock_using_subcommand status" -s v -l verbose -d 'Log every Redis round trip to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand status" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_using_subcommand log" -l since -d 'Only events of the last DUR (by the server\'s clock)' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -l limit -d 'At most the N most recent events (all that are kept, up to --log-max, by default)' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -s u -l url -d 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -l password-file -d 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand log" -l tls-ca -d 'PEM file with the CA certificate(s) that signed the server\'s certificate (rediss://)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand log" -l tls-cert -d 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand log" -l tls-key -d 'PEM file with the private key of --tls-cert' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand log" -l sentinel -d 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -l prefix -d 'Namespace for every Redis key redlock uses' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -l meta-ttl -d 'Keep a lock\'s record (fence counter, last holder) for DUR after its last use' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -l log-max -d 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -l connect-timeout -d 'Give up connecting to Redis after DUR' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -l io-timeout -d 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server\'s reply, so keep it well under --ttl' -r
complete -c redlock -n "__fish_redlock_using_subcommand log" -s f -l follow -d 'Then keep printing events as they are written, until interrupted (exit 130 on Ctrl-C)'
complete -c redlock -n "__fish_redlock_using_subcommand log" -l json -d 'One JSON object per event and line (JSON Lines) instead of text'
complete -c redlock -n "__fish_redlock_using_subcommand log" -l cluster -d 'The URLs are seed nodes of a Redis Cluster (the lock\'s keys share one hash slot)'
complete -c redlock -n "__fish_redlock_using_subcommand log" -s q -l quiet -d 'Print nothing on stderr except errors (and whom `release --force` evicted)'
complete -c redlock -n "__fish_redlock_using_subcommand log" -s v -l verbose -d 'Log every Redis round trip to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand log" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand log" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_using_subcommand wait" -s w -l wait -d 'Wait at most DUR (default: until it is free)' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -s E -l conflict-exit-code -d 'Exit status when --wait runs out with the lock still busy' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -s u -l url -d 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l password-file -d 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l tls-ca -d 'PEM file with the CA certificate(s) that signed the server\'s certificate (rediss://)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l tls-cert -d 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l tls-key -d 'PEM file with the private key of --tls-cert' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l sentinel -d 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l prefix -d 'Namespace for every Redis key redlock uses' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l meta-ttl -d 'Keep a lock\'s record (fence counter, last holder) for DUR after its last use' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l log-max -d 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l connect-timeout -d 'Give up connecting to Redis after DUR' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l io-timeout -d 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server\'s reply, so keep it well under --ttl' -r
complete -c redlock -n "__fish_redlock_using_subcommand wait" -l cluster -d 'The URLs are seed nodes of a Redis Cluster (the lock\'s keys share one hash slot)'
complete -c redlock -n "__fish_redlock_using_subcommand wait" -s q -l quiet -d 'Print nothing on stderr except errors (and whom `release --force` evicted)'
complete -c redlock -n "__fish_redlock_using_subcommand wait" -s v -l verbose -d 'Log every Redis round trip to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand wait" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand wait" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_using_subcommand help; and not __fish_seen_subcommand_from exec acquire release extend status log wait help" -f -a "exec" -d 'Take a lock, run a command while renewing it, release it when the command exits'
complete -c redlock -n "__fish_redlock_using_subcommand help; and not __fish_seen_subcommand_from exec acquire release extend status log wait help" -f -a "acquire" -d 'Take a lock and print its token (the lock stays held after redlock exits)'
complete -c redlock -n "__fish_redlock_using_subcommand help; and not __fish_seen_subcommand_from exec acquire release extend status log wait help" -f -a "release" -d 'Release a lock held with TOKEN (never someone else\'s)'
complete -c redlock -n "__fish_redlock_using_subcommand help; and not __fish_seen_subcommand_from exec acquire release extend status log wait help" -f -a "extend" -d 'Reset the TTL of a lock held with TOKEN (an expired lock is never brought back)'
complete -c redlock -n "__fish_redlock_using_subcommand help; and not __fish_seen_subcommand_from exec acquire release extend status log wait help" -f -a "status" -d 'Show who holds locks: the named KEYs, or every lock under the prefix'
complete -c redlock -n "__fish_redlock_using_subcommand help; and not __fish_seen_subcommand_from exec acquire release extend status log wait help" -f -a "log" -d 'Show a lock\'s history: who took it, when, how long they waited and held it, how it ended'
complete -c redlock -n "__fish_redlock_using_subcommand help; and not __fish_seen_subcommand_from exec acquire release extend status log wait help" -f -a "wait" -d 'Wait until a lock is free, without taking it or joining its queue'
complete -c redlock -n "__fish_redlock_using_subcommand help; and not __fish_seen_subcommand_from exec acquire release extend status log wait help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
